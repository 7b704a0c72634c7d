"""`CanonicalJson`: a JSON value read in pieces and written as `dump_json` writes the value,
prefix by prefix; text that is not valid JSON passes through raw to the value's end; a cut
leaves the raw tail of an unfinished token. Exact cases, then properties over random values,
formattings, texts and splits (hypothesis)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.tool_parsers.canonical_json import CanonicalJson, dump_json


def written(pieces: list[str], want_object: bool = False) -> tuple[CanonicalJson, list[str]]:
    """The writer after reading `pieces` in order, and what each piece added to its text."""
    writer = CanonicalJson(want_object)
    added = []
    for piece in pieces:
        before = writer.text
        writer.feed(piece)
        assert writer.text.startswith(before)
        added.append(writer.text[len(before):])
    return writer, added


def test_valid_json_is_written_canonically():
    raw = '{ "a" : [ 1 , 2.50 , -0 , 1E2 , -0.0, true , false , null ] ,\n"b" : { } , "c": [] }'
    writer, _ = written([raw], want_object=True)
    assert writer.text == '{"a": [1, 2.5, 0, 100.0, -0.0, true, false, null], "b": {}, "c": []}'
    assert (writer.done, writer.valid, writer.tail()) == (True, True, "")
    assert writer.text == dump_json(json.loads(raw))


def test_strings_are_written_as_json_dumps_writes_them():
    raw = r'"\u00e9\n\"\\\/\ud83c\udf0d\ud800x\u0000\u001f\t ü"'
    writer, _ = written([raw])
    assert writer.text == r'"é\n\"\\/🌍\ud800x\u0000\u001f\t ü"'
    assert writer.text == dump_json(json.loads(raw))


def test_each_character_is_written_once_it_is_complete():
    writer, added = written(list('{"k" : "ab\\u00e9", "n": 12}'))
    assert added == ["{", '"', "k", '"', "", ": ", "", '"', "a", "b", "", "", "", "", "", "é",
                     '"', ", ", "", '"', "n", '"', ": ", "", "", "", "12}"]
    assert writer.done


def test_a_high_surrogate_waits_for_its_pair_or_its_lack():
    assert written(['"\\ud83c', '\\udf0d"'])[1] == ['"', '🌍"']
    assert written(['"\\ud83c', "x", '"'])[1] == ['"', "\\ud83cx", '"']
    assert written(['"\\ud83c', "\\n"])[1] == ['"', "\\ud83c\\n"]
    assert written(['"\\ud83c\\ud83c', '\\udf0d"'])[1] == ['"\\ud83c', '🌍"']


def test_dump_json_escapes_lone_surrogates_only():
    assert dump_json({"s": "\ud800", "t": "é", "u": "🌍"}) == '{"s": "\\ud800", "t": "é", "u": "🌍"}'


def test_duplicate_keys_are_kept_as_written():
    assert written(['{"a": 1, "a": 2}'])[0].text == '{"a": 1, "a": 2}'


def test_the_value_ends_where_json_says():
    writer = CanonicalJson()
    assert writer.feed('{"a": 1} tail', 0) == 8  # just past the brace
    number = CanonicalJson()
    assert number.feed("12, 3", 0) == 2  # the comma ends the number, unread
    assert (number.text, number.done) == ("12", True)
    assert CanonicalJson().feed("xx{}", 2, 3) == 3  # only text[at:end] is read


@pytest.mark.parametrize(
    ("raw", "text", "done"),
    [
        ('{"a": }}', '{"a": }', True),
        ('{"a": NaN , "b": 1} x', '{"a": NaN , "b": 1}', True),
        ('{"a": -Infinity}', '{"a": -Infinity}', True),
        ('{"a": 1e999}', '{"a": 1e999}', True),
        ('{"a": ' + "1" * 5000 + "}", '{"a": ' + "1" * 5000 + "}", True),
        ('{"a": 01}', '{"a": 01}', True),
        ('{"a": [1, }', '{"a": [1, }', True),
        ('{"a": [1}', '{"a": [1}', True),
        ('{"a": "b\\xc}"}', '{"a": "b\\xc}"}', True),
        ('{"a": "line\nbreak"}', '{"a": "line\nbreak"}', True),
        ('{"a": tru }', '{"a": tru }', True),
        ('{"a" 1}', '{"a"1}', True),
        ('{"a": 1,}', '{"a": 1, }', True),
        ('{"a": {"b": 1 "c": {}}}', '{"a": {"b": 1"c": {}}}', True),
        ("[1, 2]", "[1, 2]", True),
        ('"x" ,', '"x"', True),
        ("null x", "null x", False),
    ],
)
def test_invalid_json_passes_through_raw_to_the_end_of_the_object(raw, text, done):
    """From the fault on, the raw text (whitespace held until the value goes on) to the
    brace that closes the object; a value that is not an object (`want_object`) is raw from
    its start, to a `,`, `}` or `]` outside its brackets."""
    writer, _ = written([raw], want_object=True)
    assert (writer.text, writer.done, writer.valid) == (text, done, False)


@pytest.mark.parametrize(
    ("raw", "text", "tail"),
    [
        ('{"a": 12', '{"a": ', "12"),
        ('{"a": -', '{"a": ', "-"),
        ('{"a": tr', '{"a": ', "tr"),
        ('{"a": "x\\u00', '{"a": "x', "\\u00"),
        ('{"a": "x\\', '{"a": "x', "\\"),
        ('{"a": "x\\ud83c', '{"a": "x', "\\ud83c"),
        ('{"a": "x\\ud83c\\udf', '{"a": "x', "\\ud83c\\udf"),
        ('{"a": [1, 2 ', '{"a": [1, 2', ""),
        ('{"a": NaN ', '{"a": NaN', ""),
    ],
)
def test_a_cut_leaves_the_raw_tail_of_the_unfinished_token(raw, text, tail):
    writer, _ = written([raw], want_object=True)
    assert (writer.text, writer.tail(), writer.done) == (text, tail, False)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
FORMATS = st.sampled_from([{}, {"indent": 2}, {"separators": (",", ":")},
                           {"ensure_ascii": False}, {"indent": "\t", "ensure_ascii": False}])
JSONISH = st.text(alphabet='{}[]":, \n01-.eEtrufalsn\\ux"', max_size=40)


def pieces_of(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(cut % (len(text) + 1) for cut in cuts), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, FORMATS, st.lists(st.integers(min_value=0), max_size=8))
def test_any_json_split_anywhere_is_written_as_dump_json_writes_it(value, fmt, cuts):
    raw = json.dumps(value, **fmt)
    writer, _ = written([*pieces_of(raw, cuts), " "])  # a number ends at the next character
    assert (writer.text, writer.done, writer.valid) == (dump_json(value), True, True)


@settings(max_examples=300, deadline=None)
@given(JSONISH, st.lists(st.integers(min_value=0), max_size=6), st.integers(min_value=0))
def test_any_text_is_written_prefix_monotone_whatever_the_split(raw, cuts, cut):
    """Split anywhere, the same text, tail and state; a prefix of the raw text writes a
    prefix of what the whole writes (checked piece by piece in `written`, and here for a
    prefix fed whole)."""
    whole, _ = written([raw], want_object=True)
    split, _ = written(pieces_of(raw, cuts), want_object=True)
    assert (split.text, split.tail(), split.done, split.valid) == \
        (whole.text, whole.tail(), whole.done, whole.valid)
    prefix, _ = written([raw[:cut % (len(raw) + 1)]], want_object=True)
    assert whole.text.startswith(prefix.text)
