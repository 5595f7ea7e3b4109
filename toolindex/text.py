"""Terms of a text for keyword search, English and Japanese alike.

Latin words are lower-cased, split at `snake_case`, `camelCase` and punctuation, and lightly
stemmed ("events" and "event", "refunding" and "refund" meet). Japanese has no spaces: a run of
kanji and katakana (and the hiragana inside it), cut at its particles (を, の, に…), gives its
character bigrams, the usual dictionary-free way to index CJK text; bigrams of hiragana alone
are grammar (します, ですか) and are left out, as are those across a particle (課題を起票: 課題,
起票, not 題を nor を起), which match any text that happens to use the same particle."""

import functools
import re
import unicodedata

from toolindex.lexicon import CONCEPTS

MAX_TERM = 64
_WORD = re.compile(r"[a-z0-9]+|[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff\u30fc々]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")
_HIRAGANA = re.compile(r"^[\u3040-\u309f\u30fc]+$")
# Particles: the nearest thing Japanese has to spaces between words.
_PARTICLES = re.compile(r"[をはがにでのとへもや]")
_SPACES = re.compile(r"[\s_\-]+")
# A web address names a web page; a file name with its extension (report.docx, a/b.yaml), a file.
_URL = re.compile(r"\b(?:https?://|www\.)\S+")
_FILE_NAME = re.compile(r"(?<![@\w.])[\w-]+\.[a-z][a-z0-9]{1,4}\b(?![.@\w])")
STOPWORDS = frozenset(
    """a an and are as at be by can do does did for from get i in into is it me my of on or our
    please the their them this that these those to us want we with you your which what some any
    all its need have has had will would should could there here then than how when who about
    just also not so if i'd i'm""".split()  # noqa: SIM905
)


def terms(text):
    """The terms of `text`, in order, repeats kept (their count is the term frequency), then
    the concepts it names (`toolindex.lexicon`)."""
    found, text = _split(text)
    return found + concepts(found, text)


def words(text):
    """The terms of `text` without the concepts."""
    return _split(text)[0]


def _split(text):
    """The words of `text` and the text normalised."""
    if not text:
        return [], ""
    text = unicodedata.normalize("NFKC", str(text))
    # camelCase is split, and a word so split is kept whole too: "GitHub" is github, git, hub.
    joined = [w.lower() for w in _ASCII_WORD.findall(text) if _CAMEL.search(w)]
    text = _CAMEL.sub(" ", text).lower()
    return _words(text) + [stem(w)[:MAX_TERM] for w in joined], text


def _words(text):
    found = []
    for word in _WORD.findall(text):
        if word[0].isascii():
            if word not in STOPWORDS:
                found.append(stem(word)[:MAX_TERM])
        else:
            for part in _PARTICLES.split(word):
                if len(part) == 1 and not _HIRAGANA.match(part):
                    found.append(part)
                found.extend(
                    pair
                    for pair in (part[i : i + 2] for i in range(len(part) - 1))
                    if not _HIRAGANA.match(pair)
                )
    return found


def concepts(words, text):
    """A concept term for each of its words (stemmed, among `words`) and each of its phrases
    or Japanese words found in `text` (normalised)."""
    by_word, by_phrase = _lexicon()
    found = [concept for word in words for concept in by_word.get(word, ())]
    spaced = f" {_SPACES.sub(' ', text)} "
    for phrase, concept in by_phrase:
        found += [concept] * spaced.count(f" {phrase} " if phrase.isascii() else phrase)
    urls = len(_URL.findall(text))
    files = len(_FILE_NAME.findall(_URL.sub(" ", text)))
    return found + ["~webpage"] * urls + ["~file"] * files


@functools.cache
def _lexicon():
    by_word, by_phrase = {}, []
    for line in CONCEPTS.strip().splitlines():
        name, *members = line.split()
        for member in members:
            if member.isascii() and "_" not in member:
                by_word.setdefault(stem(member.lower()), []).append(f"~{name}")
            else:
                by_phrase.append(
                    (unicodedata.normalize("NFKC", member.replace("_", " ")), f"~{name}")
                )
    return by_word, by_phrase


def stem(word):
    """A light English stemmer: plurals, -ing and -ed, and a final e, so that "create",
    "created" and "creating" meet, as do "messages" and "message"."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies"):
        word = word[:-3] + "y"
    elif word.endswith(("sses", "ches", "shes", "xes", "zes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # stopped, stop
            break
    return word[:-1] if len(word) > 3 and word.endswith("e") else word
