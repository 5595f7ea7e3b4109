"""Concepts of business-tool vocabulary, in English and Japanese: the words a person uses for
what a tool does ("a bug", 「バグ」) rarely are the words its description uses ("an issue"). A
text that says any word of a concept also yields the concept's term (`~issue`), in the index and
in a query alike, so keyword search meets synonyms across both languages (MGP §16.4's
`keywords`). General vocabulary of the kinds of tools MCP servers offer, not of any catalogue.

One line per concept (or more: they add up): its name, then its words. An English word is
matched after stemming (`toolindex.text.stem`); words joined by `_` are a phrase; Japanese
words are matched as written, anywhere in the text (`toolindex.text` reads them)."""

CONCEPTS = """
create      create new add make 作成 追加 新規 登録 起票 作って 入れて
read        read view show see display inside contents 見る 見せ 見たい 表示 読む 読み 中身
list        list all enumerate 一覧 リスト
search      search find look_for look_up lookup 検索 探す 探して 調べ
update      update edit change modify set rename 更新 変更 編集 修正
delete      delete remove erase drop 削除 消す 消して
send        send post deliver 送信 送る 送って 送りたい 投稿
cancel      cancel call_off abort 取り消 キャンセル 中止
book        book reserve reservation 予約
assign      assign give_to hand_to owner 割り当て 担当 アサイン
approve     approve accept sign_off 承認
refund      refund reimburse give_back 返金 払い戻
charge      charge pay payment bill_the 支払 決済 課金
track       track tracking where_is 追跡 どこ
translate   translate translation 翻訳 訳して 訳す
run         run trigger kick_off start execute launch 実行 起動 走らせ
acknowledge acknowledge ack 確認済 応答
upload      upload アップロード
download    download ダウンロード
available   availability available free_slot open_slot vacancy 空き 空いて 空席
file        file document 文書 ファイル
directory   directory folder dir フォルダ ディレクトリ
issue       issue bug ticket defect 課題 バグ チケット 不具合 イシュー
change      pull_request merge_request pr プルリク プルリクエスト マージリクエスト
repository  repository repo リポジトリ レポジトリ
code        code source function defined definition コード ソース 関数
commit      commit history コミット 履歴
email       email mail inbox メール
event       event meeting appointment calendar schedule
event       予定 会議 打ち合わせ ミーティング 日程 カレンダー
message     message chat dm direct_message メッセージ チャット
customer    customer client contact 顧客 お客 取引先
deal        deal opportunity pipeline_stage 商談 案件
invoice     invoice bill 請求書 請求
order       order purchase 注文 購入
product     product item sku 商品 品目
stock       stock inventory on_hand 在庫
shipment    shipment parcel package delivery shipping 荷物 配送 出荷 配達 発送
weather     weather forecast rain snow temperature 天気 予報 雨 雪 気温 天候
directions  direction route get_from get_to 行き方 道順 ルート 経路 乗り換え
place       place restaurant shop store venue 場所 店 レストラン 飲食店
log         log logs ログ
alert       alert incident pager on_call outage アラート 障害 インシデント
build       build pipeline deploy deployment ビルド パイプライン デプロイ
spreadsheet spreadsheet sheet excel workbook スプレッドシート シート 表計算
row         row rows line 行
employee    employee staff colleague people worker 社員 従業員 スタッフ 職員
leave       time_off vacation holiday leave pto 休暇 休み 有給
database    database sql db query データベース テーブル
webpage     page url website web link ページ サイト ウェブ
note        note wiki doc docs knowledge ドキュメント ノート メモ
"""
