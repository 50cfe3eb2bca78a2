"""Fuzzing the connector's option parsing (hypothesis): every sink and source option with
wrong types, negative numbers, unknown values and random text.

The contract: :func:`parse_sink_options` / :func:`parse_source_options` either accept
the options or raise :class:`OptionError` whose text names the offending option in
its documented spelling. Never another exception (not even a bare ValueError: the
user must be told which option is wrong).

Inputs that once escaped as ValueError or RecursionError are kept in
:data:`REGRESSIONS`.
"""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from pyspark_raftlog.options import (
    SINK_OPTIONS,
    SOURCE_OPTIONS,
    OptionError,
    SinkOptions,
    SourceOptions,
    check_write_columns,
    parse_sink_options,
    parse_source_options,
)

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

#: Options whose value is a number (an integer, or for sizes an integer with a unit).
NUMERIC = {
    "partitions",
    "replicationFactor",
    "chunkBytes",
    "maxInFlight",
    "requestTimeoutMs",
    "txnVersion",
    "maxRecordsPerTrigger",
    "maxBytesPerTrigger",
    "minPartitions",
}
#: Options with a closed set of words (beyond those, any word is an error).
ENUMS = {
    "acks": {"all", "1", "0", "-1"},
    "failOnDataLoss": {"true", "false"},
    "startingOffsets": {"earliest", "latest"},
    "endingOffsets": {"latest"},
}
TOPIC = "events"


def _sink(opts: dict[str, object], streaming: bool) -> SinkOptions:
    return parse_sink_options({"topic": TOPIC, **opts}, streaming=streaming)  # type: ignore[dict-item]


def _source(opts: dict[str, object], streaming: bool | None) -> SourceOptions:
    return parse_source_options({"topic": TOPIC, **opts}, streaming=streaming)  # type: ignore[dict-item]


def _parse(direction: str, opts: dict[str, object], mode: bool | None) -> object:
    if direction == "sink":
        return _sink(opts, bool(mode))
    return _source(opts, mode)


def _mentions(message: str, name: str) -> bool:
    """The message names the option: 'name' as documented, or as Spark lowercased it."""
    return f"'{name.lower()}'" in message.lower()


def _accepted_or_named(direction: str, opts: dict[str, object], mode: bool | None) -> bool:
    """Parse; True when accepted, False when rejected with an OptionError naming an option
    of ``opts``. Any other exception (or an OptionError naming none of them) fails."""
    try:
        _parse(direction, opts, mode)
    except OptionError as exc:
        message = str(exc)
        assert any(_mentions(message, str(k)) for k in opts) or (
            "topic" in opts and _mentions(message, "topic")
        ), f"{opts!r}: the error does not name the option: {message}"
        return False
    return True


DIRECTIONS = [
    ("sink", True),
    ("sink", False),
    ("source", True),
    ("source", False),
    ("source", None),
]
_OWN = {"sink": SINK_OPTIONS, "source": SOURCE_OPTIONS}

# Values of the wrong type: as Spark's DataFrameWriter/Reader.option() would pass them
# (str() of the value) and as a Python caller might hand them to the parser directly.
wrong_types = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.binary(max_size=8),
)
texts = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=string.printable, max_size=40),
    st.from_regex(r"\A-?\d{1,25}(\.\d{1,5})?\s*[kmgKMGbB]{0,3}\Z"),
    st.sampled_from(
        ["", " ", "-1", "-0", "0", "1e3", "0x10", "NaN", "inf", "None", "null", "TRUE", "yes"]
    ),
    st.builds(
        json.dumps, st.recursive(st.integers() | st.text(max_size=5), st.lists, max_leaves=6)
    ),
    st.builds(
        lambda topic, parts: json.dumps({topic: parts}),
        st.sampled_from([TOPIC, "other", ""]),
        st.dictionaries(
            st.text(alphabet=string.digits + "-x ", max_size=4),
            st.integers(min_value=-5, max_value=10**6) | st.floats() | st.none() | st.booleans(),
            max_size=3,
        ),
    ),
)


@pytest.mark.parametrize(("direction", "mode"), DIRECTIONS)
@given(data=st.data())
@FUZZ
def test_every_option_with_any_value_is_accepted_or_named(direction, mode, data) -> None:
    name = data.draw(st.sampled_from(SINK_OPTIONS + SOURCE_OPTIONS), label="option")
    value = data.draw(st.one_of(texts, wrong_types), label="value")
    key = data.draw(st.sampled_from([name, name.lower(), name.upper()]), label="spelling")
    opts = {key: value}
    accepted = _accepted_or_named(direction, opts, mode)
    if name not in _OWN[direction]:
        # an option of the other direction is never silently ignored
        assert not accepted, f"{direction} accepted {name}={value!r}"


@pytest.mark.parametrize(("direction", "mode"), DIRECTIONS)
@given(data=st.data())
@FUZZ
def test_negative_numbers_are_rejected_naming_the_option(direction, mode, data) -> None:
    name = data.draw(st.sampled_from(sorted(NUMERIC & set(_OWN[direction]))), label="option")
    number = data.draw(st.integers(max_value=-1, min_value=-(10**40)), label="number")
    suffix = data.draw(st.sampled_from(["", " ", "k", "m", "g"]), label="suffix")
    opts: dict[str, object] = {name: f"{number}{suffix}"}
    with pytest.raises(OptionError) as info:
        _parse(direction, opts, mode)
    assert _mentions(str(info.value), name), str(info.value)


@pytest.mark.parametrize(("direction", "mode"), DIRECTIONS)
@given(data=st.data())
@FUZZ
def test_unknown_values_of_closed_options_are_rejected(direction, mode, data) -> None:
    name = data.draw(st.sampled_from(sorted(set(ENUMS) & set(_OWN[direction]))), label="option")
    word = data.draw(st.text(alphabet=string.ascii_letters + string.digits + "-", max_size=12))
    assume(word.strip().lower() not in ENUMS[name])
    with pytest.raises(OptionError) as info:
        _parse(direction, {name: word}, mode)
    assert _mentions(str(info.value), name), str(info.value)


@pytest.mark.parametrize(("direction", "mode"), DIRECTIONS)
@given(data=st.data())
@FUZZ
def test_wrong_numeric_types_are_rejected(direction, mode, data) -> None:
    name = data.draw(st.sampled_from(sorted(NUMERIC & set(_OWN[direction]))), label="option")
    value = data.draw(
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True).filter(lambda f: not f.is_integer()),
            st.booleans(),
            st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=3),
            st.text(alphabet=string.ascii_letters, min_size=1, max_size=8).filter(
                lambda s: s.lower() not in {"k", "m", "g", "b", "kb", "mb", "gb"}
            ),
        ),
        label="value",
    )
    with pytest.raises(OptionError) as info:
        _parse(direction, {name: value}, mode)
    assert _mentions(str(info.value), name), str(info.value)


@pytest.mark.parametrize(("direction", "mode"), DIRECTIONS)
@given(data=st.data())
@FUZZ
def test_many_options_at_once_fail_on_one_they_name(direction, mode, data) -> None:
    names = data.draw(
        st.lists(st.sampled_from(SINK_OPTIONS + SOURCE_OPTIONS), min_size=1, max_size=6),
        label="options",
    )
    opts: dict[str, object] = {}
    for name in names:
        value = data.draw(st.one_of(texts, wrong_types), label=name)
        opts[name] = value
    _accepted_or_named(direction, opts, mode)


@pytest.mark.parametrize(("direction", "mode"), DIRECTIONS)
@given(key=st.text(min_size=1, max_size=30), value=st.text(max_size=10))
@FUZZ
def test_unknown_keys_are_ignored_or_rejected_by_name(direction, mode, key, value) -> None:
    try:
        _parse(direction, {key: value}, mode)
    except OptionError as exc:
        assert (
            _mentions(str(exc), key)
            or _mentions(str(exc), key.lower())
            or any(_mentions(str(exc), k) for k in SINK_OPTIONS + SOURCE_OPTIONS)
        ), str(exc)


@pytest.mark.parametrize(("direction", "mode"), DIRECTIONS)
@given(value=st.one_of(texts, wrong_types))
@FUZZ
@example(value="")
@example(value="..")
@example(value="a" * 250)
@example(value="bad/topic")
def test_topic_values(direction, mode, value) -> None:
    opts = {"topic": value}
    try:
        if direction == "sink":
            parse_sink_options(opts, streaming=bool(mode))  # type: ignore[dict-item]
        else:
            parse_source_options(opts, streaming=mode)  # type: ignore[dict-item]
    except OptionError as exc:
        assert _mentions(str(exc), "topic") or _mentions(str(exc), "startingOffsets"), str(exc)


@pytest.mark.parametrize("direction", ["sink", "source"])
def test_missing_topic_is_named(direction) -> None:
    with pytest.raises(OptionError, match="'topic'"):
        if direction == "sink":
            # without the option, the DataFrame may still name topics in a `topic` column
            check_write_columns(parse_sink_options({}, streaming=True), ["value"])
        else:
            parse_source_options({}, streaming=True)


#: Inputs that used to raise something other than OptionError (int() of > 4300 digits,
#: a non-ASCII digit passing str.isdigit(), JSON nested past the recursion limit).
REGRESSIONS = [
    ("sink", "chunkBytes", "9" * 5000),
    ("sink", "servers", "localhost:" + "9" * 5000),
    ("source", "maxBytesPerTrigger", "9" * 5000),
    ("source", "startingOffsets", '{"events": {"\u00b2": 1}}'),
    ("source", "startingOffsets", '{"events": {"0": ' + "9" * 5000 + "}}"),
    ("source", "startingOffsets", '{"events": {"' + "9" * 5000 + '": 1}}'),
    ("source", "startingOffsets", '{"events": {"0": ' + "[" * 5000 + "]" * 5000 + "}}"),
    ("sink", "chunkBytes", "\u0661\u0660\u0662\u0664"),  # Arabic-Indic 1024
    ("sink", "partitions", "1_000"),
]


@pytest.mark.parametrize(
    ("direction", "name", "value"),
    [pytest.param(*case, id=f"{case[0]}-{case[1]}-{i}") for i, case in enumerate(REGRESSIONS)],
)
def test_regressions_raise_option_error(direction, name, value) -> None:
    try:
        _parse(direction, {name: value}, True)
    except OptionError as exc:
        assert _mentions(str(exc), name), str(exc)
    except Exception as exc:
        raise AssertionError(f"{name}={value[:40]!r}...: {type(exc).__name__}: {exc}") from exc
    else:
        raise AssertionError(f"{name}={value[:40]!r}... was accepted")
