"""JSON that is not JSON, said to a person: line, column, what was expected, and the line
with a marker under the spot (core/json_input.py), never the parser's own words."""

from __future__ import annotations

import pytest

from core import json_input
from core.errors import BadInput


def syntax(text: str) -> json_input.SyntaxProblem:
    with pytest.raises(BadInput) as caught:
        json_input.loads(text)
    assert caught.value.syntax is not None
    return caught.value.syntax


def test_a_missing_comma_is_said_with_its_line_column_and_a_marker_under_it():
    problem = syntax('{\n  "item": "lamp"\n  "qty": 1\n}')
    assert (problem.line, problem.column) == (3, 3)
    assert (
        str(problem) == "Line 3, column 3: A comma (,) or a closing bracket is missing before this."
    )
    assert problem.excerpt == '  "qty": 1'
    assert problem.marker == "  ^"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"a" 1}', "A colon (:) is missing between the key and this"),
        ("{a: 1}", "A key in double quotes was expected here"),
        ('{"a": 1,}', "A key in double quotes was expected here"),
        ('{"a": }', "A value was expected here"),
        ("", "A value was expected here"),
        ('{"a": "x', "This string has no closing double quote"),
        ('{"a": "\\q"}', "This backslash escape is not one JSON knows"),
        ('{"a": "\\u12"}', "\\u must be followed by four hexadecimal digits"),
        ("{} x", "The JSON value ends before this"),
    ],
)
def test_each_kind_of_syntax_error_is_said_in_words(text, words):
    problem = syntax(text)
    assert words in problem.message
    for parser_words in ("Expecting", "delimiter", "enclosed", "Unterminated", "Extra data"):
        assert parser_words not in problem.message


def test_the_marker_keeps_tabs_so_it_stays_under_the_spot():
    problem = syntax('{\n\t"a": 1\n\t"b": 2}')
    assert problem.excerpt == '\t"b": 2}' and problem.marker == "\t^"


def test_a_windows_line_ending_is_not_part_of_the_line_shown():
    problem = syntax('{\r\n"a": 1\r\n"b": 2}')
    assert problem.line == 3 and problem.excerpt == '"b": 2}'


def test_a_long_line_is_shown_around_the_spot_only():
    text = '{"a": "' + "x" * 300 + '" "b": 1}'
    problem = syntax(text)
    assert problem.column == 310
    assert len(problem.excerpt) <= 82 and problem.excerpt.startswith("…")
    assert problem.excerpt[len(problem.marker) - 1] == '"'  # the marker is under the spot


def test_the_api_keeps_its_message_and_code_for_bad_json():
    with pytest.raises(BadInput) as caught:
        json_input.loads('{"a" 1}')
    assert caught.value.code == "malformed_request"
    assert caught.value.message.startswith("Not valid JSON: Expecting ':' delimiter")
