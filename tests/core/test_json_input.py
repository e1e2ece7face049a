"""The one JSON validator (core/json_input.py): characters, keys, paths and depth."""

from __future__ import annotations

import io
import json
import time

import pytest

from core import json_input, text_input
from core.errors import BadInput, InvalidCharacters, TooDeep
from core.parsers import JSONParser
from tenants.api_errors import exception_handler


def refusal(text: str | bytes, **kwargs) -> BadInput:
    with pytest.raises(BadInput) as caught:
        json_input.loads(text, **kwargs)
    return caught.value


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def test_a_nul_character_in_a_value_is_refused_naming_its_path():
    error = refusal('{"input": {"m": "a\\u0000b"}}')
    assert isinstance(error, InvalidCharacters)
    assert error.code == "invalid_characters"
    assert list(error.fields) == ["input.m"]
    assert "NUL" in error.fields["input.m"][0]


def test_the_path_names_list_positions_and_keys_below_them():
    error = refusal('{"items": [1, 2, 3, {"k": "x\\u0000"}]}')
    assert list(error.fields) == ["items[3].k"]


def test_a_nul_character_in_a_key_is_refused_and_the_key_is_shown_escaped():
    error = refusal('{"input": {"a\\u0000b": 1}}')
    assert list(error.fields) == ["input.a\\u0000b"]
    json.dumps(error.as_dict()).encode("utf-8")  # the answer itself can be sent


def test_a_root_names_where_the_document_came_from():
    error = refusal('{"m": "\\u0000"}', root="arguments")
    assert list(error.fields) == ["arguments.m"]


def test_a_nul_in_a_top_level_string_is_a_non_field_error():
    assert list(refusal('"\\u0000"').fields) == ["non_field_errors"]


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "a\\udc00b"])
def test_lone_surrogates_are_refused_in_values_and_keys(escape):
    for text in (f'{{"v": "{escape}"}}', f'{{"{escape}": 1}}'):
        error = refusal(text)
        assert error.code == "invalid_characters"
        assert "surrogate" in next(iter(error.fields.values()))[0]
        json.dumps(error.as_dict()).encode("utf-8")


def test_a_surrogate_pair_is_an_ordinary_character():
    assert json_input.loads('{"v": "\\ud83d\\ude00"}') == {"v": "\U0001f600"}


@pytest.mark.parametrize("escape", ["\\u0000", "\\uD800", "\\uDBFF"])
def test_upper_case_escapes_of_bad_characters_are_refused_too(escape):
    assert refusal(f'{{"v": ["ok", "a{escape}"]}}').code == "invalid_characters"


def test_a_lone_surrogate_given_as_text_not_as_an_escape_is_refused():
    assert refusal('{"v": "a\ud800"}').code == "invalid_characters"


def test_an_escaped_backslash_before_u0000_is_text_not_a_nul():
    assert json_input.loads('{"v": "\\\\u0000"}') == {"v": "\\u0000"}


def test_the_first_problem_in_the_document_is_the_one_reported():
    error = refusal('{"a": ["ok", "\\u0000"], "b": "\\u0000"}')
    assert list(error.fields) == ["a[1]"]


def test_nesting_up_to_the_limit_is_accepted_and_one_more_is_refused(settings):
    settings.MAX_JSON_DEPTH = 32
    assert json_input.loads(nested(32)) is not None
    error = refusal(nested(33))
    assert isinstance(error, TooDeep) and error.code == "too_deep"
    assert "32" in error.message


def test_objects_count_towards_the_depth_like_arrays():
    text = '{"a": ' * 33 + "1" + "}" * 33
    assert refusal(text).code == "too_deep"


def test_brackets_inside_strings_are_not_nesting():
    text = json.dumps({"v": "[" * 100_000 + "{" * 1000})
    assert json_input.loads(text)["v"].startswith("[[[")


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        "{" * 100_000,
        '{"a":' * 100_000,
        nested(100_000),
        '"' + '\\"' * 200_000,  # an unterminated string of escaped quotes
        '["' + "\\" * 300_000,
    ],
)
def test_huge_or_deep_input_is_refused_quickly_without_recursion(text):
    started = time.monotonic()
    error = refusal(text)
    assert error.code in ("too_deep", "malformed_request")
    assert time.monotonic() - started < 0.5


def test_a_python_value_nested_too_deep_is_refused_without_recursion():
    value: list = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(TooDeep):
        json_input.validate(value)


@pytest.mark.parametrize(
    "text",
    ["{not json", "NaN", '{"v": Infinity}', '{"v": -Infinity}', '{"v": 1e999}', "1" * 5000],
)
def test_text_that_is_not_strict_json_is_malformed(text):
    error = refusal(text)
    assert error.code == "malformed_request"


def test_bytes_that_are_not_utf8_are_malformed():
    error = refusal(b'{"v": "\xff\xfe"}')
    assert error.code == "malformed_request" and "UTF-8" in error.message


def test_an_error_is_a_value_error_so_optional_input_can_treat_it_as_unreadable():
    with pytest.raises(ValueError):
        json_input.loads('{"v": "\\u0000"}')


def test_plain_text_fields_are_checked_for_the_same_characters():
    text_input.check_text("fine", field="q")
    with pytest.raises(InvalidCharacters) as caught:
        text_input.check_text("a\x00", field="q")
    assert list(caught.value.fields) == ["q"]


def test_the_api_parser_refuses_with_the_standard_error_body():
    with pytest.raises(InvalidCharacters) as caught:
        JSONParser().parse(io.BytesIO(b'{"input": {"m": "a\\u0000b"}}'), "application/json", {})
    response = exception_handler(caught.value, {})
    assert response.status_code == 400
    assert response.data["code"] == "invalid_characters"
    assert list(response.data["fields"]) == ["input.m"]


def test_the_api_parser_reads_the_charset_the_request_names():
    body = '{"v": "caf\u00e9"}'.encode("latin-1")
    parsed = JSONParser().parse(io.BytesIO(body), "application/json", {"encoding": "latin-1"})
    assert parsed == {"v": "caf\u00e9"}
