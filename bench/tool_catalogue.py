"""A synthetic but realistic catalogue of MCP tools, and labelled search queries over it, for
benchmarking tool discovery (keyword/BM25 search picking the right tool out of 1,000-10,000).

    .venv/bin/python bench/tool_catalogue.py [N=1000] [SEED=0]

Standard library only. `SHAPES` are hand-written tool shapes (name, type, English and Japanese
descriptions, arguments) in 25 domains; each domain also has a few objects that get the usual
get/list/search/create/update/delete tools. `catalogue(n, seed)` crosses these operations with
the domain's vendors (`github_create_issue`, `jira_create_issue`…) and, past the first 1,745
tools, with per-region or per-environment instances of a vendor's server (`jira_eu_…`,
server `jira-eu`), and words each description from one of several templates, about a third in
Japanese. The operations the queries aim at are taken first, so `queries(tools)` finds its
right answers at n=1000 as at n=10000: a query naming a vendor expects that vendor's tools
(every instance), one naming none expects every vendor's. Deterministic for (n, seed).
"""

import random
import re
import sys
from collections import Counter
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
INSTANCES = ("", "eu", "us", "apac", "staging", "sandbox", "internal")
ACRONYMS = {"sql": "SQL", "url": "URL"}

# verb → Japanese: a suru-noun (作成 → 作成します/作成する), or ます-form/dictionary form/noun.
VERBS = dict(
    item.split()
    for item in """
read 読み取ります/読み取る/読み取り ; write 書き込みます/書き込む/書き込み ; list 一覧表示
search 検索 ; get 取得 ; move 移動 ; create 作成 ; merge マージ ; update 更新 ; add 追加
log 記録 ; send 送信 ; draft 作成 ; reply 返信 ; refund 返金 ; capture 売上確定 ; post 投稿
cancel キャンセル ; run 実行 ; execute 実行 ; describe 表示 ; fetch 取得 ; take 撮影
click クリック ; upload アップロード ; download ダウンロード ; append 追加 ; request 申請
approve 承認 ; adjust 調整 ; transfer 移動 ; track 追跡 ; schedule 手配 ; check 確認 ; book 予約
hold 仮押さえ ; geocode 座標変換 ; translate 翻訳 ; detect 判定 ; query 照会 ; trigger 実行
acknowledge 確認済みにします/確認済みにする/確認 ; deploy デプロイ ; close クローズ
find 探します/探す/検索 ; preview プレビュー ; record 登録 ; delete 削除 ; fulfill 発送処理
assign 割り当てます/割り当てる/割り当て
""".replace("\n", " ; ").split(" ; ")
    if item.strip()
)
A_VERBS = {"create", "add", "send", "post", "draft", "log", "record", "request", "book", "take"}
A_VERBS |= {"schedule", "hold", "run", "execute", "trigger", "deploy", "write", "upload"}

# Argument name → "type Description"; a name not here is a string ("…_id" an ID, "…_date" a
# date, "…_at" a date-time) described by its words.
PROPS = {}
for _item in """
path:str Path of the file or directory, relative to the workspace root ; content:str Text to write
encoding:str Text encoding of the file (default utf-8) ; max_bytes:int Stop after this many bytes
create_dirs:bool Create missing parent directories ; recursive:bool Include subdirectories
pattern:str Glob pattern, e.g. **/*.csv ; exclude:list Glob patterns to skip
source_path:str Current path ; destination_path:str New path ; repo:str Repository as owner/name
head:str Branch that holds the changes ; base:str Branch to merge into, e.g. main
body:str Body text (markdown supported) ; draft:bool Open it as a draft ; title:str Title
pull_number:int Number of the pull request ; merge_method:enum(merge/squash/rebase) How to merge
branch:str Branch name ; since:datetime Only items after this time ; ref:str Branch, tag or SHA
author:str Author's username or email ; limit:int Maximum number of results ; name:str Name
cursor:str Page token from the previous call ; query:str Search text ; language:str Language
from_ref:str Branch, tag or commit to start from ; description:str Longer description
private:bool Make it private ; tag_name:str Git tag, e.g. v1.4.0 ; url:uri Web address (URL)
events:list Event types that trigger it ; project:str Project key or name, e.g. PROJ
issue_type:enum(bug/task/story/epic) Kind of issue ; labels:list Labels to apply
priority:enum(low/medium/high/urgent) Priority ; status:str Status, e.g. open, in progress, done
assignee:str Username of the assignee ; issue_key:str Issue key or number, e.g. PROJ-123 or #42
color:str Hex color, e.g. #d73a4a ; email:email Email address ; phone:str Phone number
stage:str Pipeline stage, e.g. qualified, proposal, closed won ; note:str Free-text note
activity_type:enum(call/meeting/email/note) Kind of activity ; website:uri Company website
amount:num Amount in major units, e.g. 12.50 ; to:list Recipient email addresses
subject:str Subject line ; cc:list Addresses to copy ; attachments:list Files to attach
folder:str Mailbox folder, e.g. INBOX ; unread_only:bool Only unread messages
reply_all:bool Reply to every recipient ; criteria:str Match rule, e.g. from:boss has:attachment
time_min:datetime Start of the time window ; time_max:datetime End of the time window
start:datetime Start time (ISO 8601) ; end:datetime End time (ISO 8601) ; location:str Place
attendees:list Email addresses of the attendees ; duration_minutes:int Length in minutes
notify_attendees:bool Email the attendees about it ; timezone:str IANA time zone, e.g. Asia/Tokyo
capacity:int Number of seats ; minutes_before:int Minutes before the start ; reason:str Reason
currency:str ISO currency code, e.g. USD, JPY ; at_period_end:bool Wait for the period's end
evidence:str Evidence to submit ; channel:str Channel name or ID, e.g. #general ; text:str Text
thread_ts:str Parent message timestamp, to reply in its thread ; user:str User ID, handle or email
from_user:str Only messages from this user ; include_archived:bool Include archived channels
members:list User IDs of the members ; is_private:bool Make it private ; sql:str SQL statement
database:str Database name ; max_rows:int Maximum rows to return ; schema:str Schema, e.g. public
table:str Table name ; max_length:int Maximum characters to return ; num_results:int Result count
full_page:bool Capture the whole scrollable page ; selector:str CSS selector of the element
bucket:str Bucket or drive name ; key:str Object key (path) in the bucket ; region:str Region
content_type:str MIME type, e.g. application/pdf ; prefix:str Only keys starting with this
expires_in:int Seconds until the link expires ; space:str Space key ; sheet:str Sheet (tab) name
range:str A1 range, e.g. Sheet1!A1:D20 ; values:rows Rows of cell values ; sheets:list Tab names
chart_type:enum(bar/line/pie) Chart type ; department:str Department or team ; comment:str Comment
leave_type:enum(vacation/sick/parental/unpaid) Kind of leave ; sku:str Product code (SKU)
warehouse:str Warehouse code ; quantity_change:int Units to add (+) or remove (-)
quantity:int Number of units ; from_warehouse:str Source warehouse ; to_warehouse:str Target one
items:objs Line items: sku and quantity ; address:str Street address ; service:str Service level
tracking_number:str Carrier tracking number ; from_address:str Sender's address
to_address:str Recipient's address ; weight_kg:num Parcel weight in kilograms
parcels:int Number of parcels ; cuisine:str Cuisine, e.g. sushi ; date:date Date (YYYY-MM-DD)
party_size:int Number of guests ; time:str Time (HH:MM) ; rating:int Rating from 1 to 5
units:enum(metric/imperial) Units ; days:int Days to forecast (1-14) ; origin:str Starting point
destination:str Where to go (address or place) ; near:str Place or coordinates to search around
mode:enum(driving/walking/transit/bicycling) Travel mode ; radius_m:int Search radius in meters
target_lang:str Target language code, e.g. en, ja ; source_lang:str Source language (or detect)
formality:enum(default/more/less) Formality ; entries:map Source term → target term
panels:objs Panel definitions ; threshold:num Value that triggers the alert ; step:str e.g. 1m
severity:enum(sev1/sev2/sev3/sev4) Severity ; variables:map Pipeline variables ; cron:str Cron
version:str Version or tag ; environment:str Environment, e.g. staging, production
tail:int Only the last N lines ; value:str Secret value ; requester_email:email Customer's email
public:bool Visible to the customer (false: internal note) ; resolution:str How it was solved
tone:enum(friendly/formal/concise) Tone ; actions:objs Actions to apply ; restock:bool Restock
customer_email:email Customer's email ; code:str Coupon code ; percent_off:num Discount percent
price:num Price in the store currency ; line_items:objs Lines: description, quantity, unit price
overdue_only:bool Only past their due date ; category:str Category, e.g. travel ; memo:str Memo
receipt_url:uri Link to the receipt image ; lines:objs Debit and credit lines
""".replace("\n", " ; ").split(" ; "):
    if _item.strip():
        _name, _spec = _item.strip().split(":", 1)
        PROPS[_name] = _spec

# "= pool | Vendor, …" (Google Calendar's key is google_calendar), "+ object 名詞 [=verbs]: fields
# ; …" (the objects' CRUD tools), then shapes of two lines: "name type 名詞 | English description"
# and "  arguments (x? optional) | 日本語の説明".
DOMAINS_TEXT = (DATA / "tool_shapes.txt").read_text(encoding="utf-8")

# CRUD verbs of a domain's objects: type, English and Japanese description, arguments.
CRUD = {
    "get": ("read", "Get one {o} by its ID.", "IDを指定して{j}を1件取得します。"),
    "list": ("read", "List {os}, newest first.", "{j}の一覧を取得します。"),
    "search": ("read", "Search {os} by keyword.", "キーワードで{j}を検索します。"),
    "create": ("action", "Create a new {o}.", "新しい{j}を作成します。"),
    "update": ("action", "Change fields of {a} {o}.", "既存の{j}の内容を更新します。"),
    "delete": ("action", "Delete {a} {o} permanently.", "{j}を削除します。元に戻せません。"),
}
EN_TEMPLATES = (
    "{desc}",
    "{desc}",
    "{desc} ({vendor})",
    "{vendor}: {desc}",
    "{V3} {art}{obj} in {vendor}.",
    "{V3} {art}{obj} through the {vendor} API. {desc}",
    "Use this tool to {v} {art}{obj} in {vendor}.",
)
JA_TEMPLATES = (
    "{desc}",
    "{desc}",
    "{vendor}の{obj}を{masu}。",
    "{desc}（{vendor}）",
    "{vendor} API を使って{obj}を{masu}。{desc}",
    "{obj}を{dict}ためのツールです。対応サービス: {vendor}",
)

# Labelled queries: "operation[,operation…][@vendor] | what a person would type".
QUERIES_TEXT = (DATA / "tool_queries.txt").read_text(encoding="utf-8")


def _plural(word):
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + ("es" if word.endswith(("s", "x", "ch", "sh")) else "s")


def _third(verb):
    return _plural(verb) if verb != "reply" else "replies to"


def _ja_verb(verb):
    parts = VERBS[verb].split("/")
    return parts if len(parts) == 3 else (parts[0] + "します", parts[0] + "する", parts[0])


def _schema_prop(name):
    spec = PROPS.get(name)
    if spec is None:
        words = name.replace("_", " ")
        kind = "date" if name.endswith("_date") else "datetime" if name.endswith("_at") else "str"
        words = f"ID of the {words[:-3]}" if name.endswith("_id") else words.capitalize()
        spec = f"{kind} {words}"
    kind, description = spec.split(" ", 1)
    scalar = {"str": "string", "int": "integer", "num": "number", "bool": "boolean"}
    if kind in scalar:
        prop = {"type": scalar[kind]}
    elif kind in ("date", "datetime", "email", "uri"):
        prop = {"type": "string", "format": kind.replace("datetime", "date-time")}
    elif kind.startswith("enum("):
        prop = {"type": "string", "enum": kind[5:-1].split("/")}
    elif kind == "map":
        prop = {"type": "object", "additionalProperties": {"type": "string"}}
    else:  # list, objs, rows
        items = {"list": "string", "objs": "object", "rows": "array"}[kind]
        prop = {"type": "array", "items": {"type": items}}
    if kind in ("int", "num"):
        prop["minimum"] = 1 if name in ("limit", "quantity", "party_size", "days") else 0
        if name in ("quantity_change", "amount"):
            prop.pop("minimum")
    return prop | {"description": description}


def _op(verb, obj_name, kind, en, ja, obj_ja, args, domain):
    obj_en = " ".join(ACRONYMS.get(w, w) for w in obj_name.split("_"))
    return {
        "name": f"{verb}_{obj_name}" if verb != "reply" else f"reply_to_{obj_name}",
        "verb": verb,
        "type": kind,
        "obj": obj_en,
        "obj_ja": obj_ja,
        "en": en,
        "ja": ja,
        "args": args.split(),
        "domain": domain,
    }


def _parse():
    domains, shapes, header = [], [], None
    for line in DOMAINS_TEXT.strip().splitlines():
        if line.startswith("= "):
            pool, vendors = line[2:].split(" | ")
            vendors = [(re.sub(r"\W+", "_", v.lower()), v) for v in vendors.split(", ")]
            domains.append({"pool": pool, "vendors": vendors, "ops": [], "objects": []})
        elif line.startswith("+ "):
            domains[-1]["objects"] += [o.strip() for o in line[2:].split(" ; ")]
        elif line.startswith("  "):
            args, ja = line.strip().split(" | ")
            name, kind, obj_ja, en = header
            verb, obj = name[: name.index("_")], name[name.index("_") + 1 :]
            obj = obj.removeprefix("to_")
            shapes.append(_op(verb, obj, kind, en, ja, obj_ja, args, domains[-1]["pool"]))
            domains[-1]["ops"].append(shapes[-1])
        else:
            head, en = line.split(" | ")
            header = (*head.split(" ", 2), en)
    for domain in domains:
        names = {op["name"] for op in domain["ops"]}
        for spec in domain.pop("objects"):
            head, fields = spec.split(": ")
            obj, obj_ja, *verbs = head.split()
            verbs = verbs[0][1:].split(",") if verbs else list(CRUD)
            for verb in verbs:
                kind, en, ja = CRUD[verb]
                name = obj if verb in ("get", "create", "update", "delete") else _plural(obj)
                words = obj.replace("_", " ")
                args = {
                    "list": "limit? cursor?",
                    "search": "query limit?",
                    "create": fields,
                    "update": f"{obj}_id " + " ".join(f.rstrip("?") + "?" for f in fields.split()),
                }.get(verb, f"{obj}_id")
                a = "an" if words[0] in "aeiou" else "a"
                en, ja = en.format(o=words, os=_plural(words), a=a), ja.format(j=obj_ja)
                op = _op(verb, name, kind, en, ja, obj_ja, args, domain["pool"])
                if op["name"] not in names:
                    domain["ops"].append(op)
                    names.add(op["name"])
    return domains, shapes


def _schema(args):
    props = {a.rstrip("?"): _schema_prop(a.rstrip("?")) for a in args}
    required = [a for a in args if not a.endswith("?")]
    return {"type": "object", "properties": props, "required": required}


DOMAINS, _SHAPE_OPS = _parse()
SHAPES = [  # the hand-written shapes, as tools without a vendor
    {
        "name": op["name"],
        "description": op["en"],
        "description_ja": op["ja"],
        "input_schema": _schema(op["args"]),
        "mcpletType": op["type"],
    }
    for op in _SHAPE_OPS
]
QUERIES = []  # (operations, vendor or "", text)
for _line in QUERIES_TEXT.strip().splitlines():
    _target, _text = _line.split(" | ", 1)
    _ops, _, _vendor = _target.partition("@")
    QUERIES.append((_ops.split(","), _vendor, _text))


def _describe(op, vendor, japanese, rng):
    verb = op["verb"]
    if japanese:
        masu, dict_form, noun = _ja_verb(verb)
        template = rng.choice(JA_TEMPLATES)
        fields = {"desc": op["ja"], "obj": op["obj_ja"], "masu": masu, "dict": dict_form}
        return template.format(vendor=vendor, **fields), f"{op['obj_ja']}の{noun}"
    obj, plural = op["obj"], op["obj"].endswith("s") and not op["obj"].endswith(("ss", "us"))
    if plural:
        art = ""
    elif verb == "create":
        art = "a new "
    elif verb in A_VERBS:
        art = "an " if obj[0] in "aeiou" else "a "
    else:
        art = "the "
    v = "reply to" if verb == "reply" else verb
    text = rng.choice(EN_TEMPLATES).format(
        desc=op["en"], vendor=vendor, V3=_third(verb).capitalize(), v=v, art=art, obj=obj
    )
    title = " ".join(w[:1].upper() + w[1:] for w in f"{v} {obj}".split())
    return text, title


def _tool(domain, vendor, instance, op, rng):
    key, display = vendor
    server = key.replace("_", "-") + (f"-{instance}" if instance else "")
    name = f"{key}_{instance}_{op['name']}" if instance else f"{key}_{op['name']}"
    assert NAME_RE.match(name), name
    description, title = _describe(op, display, rng.random() < 1 / 3, rng)
    return {
        "name": name,
        "title": title,
        "description": description,
        "input_schema": _schema(op["args"]) | {"additionalProperties": False},
        "mcplet_type": op["type"],
        "pool": domain["pool"],
        "server": server,
    }


def catalogue(n, seed=0):
    """`n` tools, deterministic for (n, seed). Every vendor's tools for the operations the
    queries aim at come first (549), then other operations, then other instances."""
    rng = random.Random(seed)
    targeted = {name for ops, _vendor, _text in QUERIES for name in ops}
    first, base, more = [], [], []
    for domain in DOMAINS:
        for vendor in domain["vendors"]:
            for instance in INSTANCES:
                for op in domain["ops"]:
                    combo = (domain, vendor, instance, op)
                    if instance:
                        more.append(combo)
                    else:
                        (first if op["name"] in targeted else base).append(combo)
    if n > len(first) + len(base) + len(more):
        raise ValueError(f"at most {len(first) + len(base) + len(more)} tools")
    for group in (first, base, more):
        rng.shuffle(group)
    tools = [_tool(*combo, rng) for combo in (first + base + more)[:n]]
    rng.shuffle(tools)
    assert len({t["name"] for t in tools}) == len(tools)
    return tools


def _vendor_and_op(tool):
    server = tool["server"]
    for instance in INSTANCES[1:]:
        server = server.removesuffix(f"-{instance}")
    return server.replace("-", "_"), tool["name"][len(tool["server"]) + 1 :]


def queries(tools):
    """The labelled queries, each with every tool of `tools` that answers it (a query whose
    tools are all missing, possible only under 549 tools, is left out)."""
    found = {}
    for tool in tools:
        vendor, op = _vendor_and_op(tool)
        found.setdefault(op, []).append((vendor, tool["name"]))
    out = []
    for ops, wanted, text in QUERIES:
        expected = sorted(n for op in ops for v, n in found.get(op, ()) if wanted in ("", v))
        if expected:
            lang = "ja" if any(ord(c) > 0x3000 for c in text) else "en"
            out.append({"query": text, "expected": expected, "lang": lang})
    return out


def main(argv):
    n = int(argv[1]) if len(argv) > 1 else 1000
    seed = int(argv[2]) if len(argv) > 2 else 0
    tools = catalogue(n, seed)
    labelled = queries(tools)

    japanese = sum(any(ord(c) > 0x3000 for c in t["description"]) for t in tools)
    print(f"{len(tools)} tools (seed {seed}) from {len(SHAPES)} shapes in {len(DOMAINS)} domains")
    servers, pools = len({t["server"] for t in tools}), len({t["pool"] for t in tools})
    print(f"  servers: {servers}, pools: {pools}")
    print(f"  types: {dict(Counter(t['mcplet_type'] for t in tools))}")
    print(f"  Japanese descriptions: {japanese} ({japanese / len(tools):.0%})")
    print(f"{len(labelled)} queries: {dict(Counter(q['lang'] for q in labelled))}")
    size = sum(len(q["expected"]) for q in labelled) / max(len(labelled), 1)
    print(f"  right answers per query: {size:.1f} on average")
    sample = random.Random(seed)
    print("\nSample tools:")
    for tool in sample.sample(tools, 6):
        print(f"  {tool['name']} [{tool['server']}, {tool['pool']}, {tool['mcplet_type']}]")
        print(f"    {tool['title']}: {tool['description']}")
        print(f"    arguments: {', '.join(tool['input_schema']['properties'])}")
    print("\nSample queries:")
    for query in sample.sample(labelled, 6):
        print(f"  [{query['lang']}] {query['query']!r} -> {', '.join(query['expected'][:4])}")


if __name__ == "__main__":
    main(sys.argv)
