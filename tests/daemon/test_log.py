"""structlog configuration: JSON off a terminal, UTC ISO times, context, no secrets."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from monitor.observe import log


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """Configure logging into a buffer; undo it afterwards."""
    out = io.StringIO()
    log.configure(stream=out)
    yield out
    structlog.reset_defaults()
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    log._secrets.clear()


def lines(out: io.StringIO) -> list[dict[str, object]]:
    """Every line written so far, parsed as JSON (fails if one is not)."""
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_json_lines_with_utc_iso_time_and_bound_target(stream: io.StringIO) -> None:
    with structlog.contextvars.bound_contextvars(target="shop"):
        log.get_logger("monitor.test").info("check", outcome="ok", urls=3)
    (line,) = lines(stream)
    assert line["event"] == "check"
    assert line["target"] == "shop"
    assert line["level"] == "info"
    assert line["urls"] == 3
    assert line["logger"] == "monitor.test"
    assert str(line["timestamp"]).endswith("Z")


def test_lines_below_the_level_are_dropped_ours_and_libraries() -> None:
    out = io.StringIO()
    log.configure(json=True, level="warning", stream=out)
    try:
        logger = log.get_logger("monitor.test")
        logger.info("quiet")
        logger.debug("quieter")
        logging.getLogger("uvicorn.error").info("quiet too")
        logger.warning("loud", n=1)
        logging.getLogger("uvicorn.error").error("loud too")
    finally:
        structlog.reset_defaults()
        for handler in list(logging.getLogger().handlers):
            logging.getLogger().removeHandler(handler)
    assert [(line["event"], line["level"]) for line in lines(out)] == [
        ("loud", "warning"), ("loud too", "error")]


def test_library_logs_are_json_too(stream: io.StringIO) -> None:
    logging.getLogger("uvicorn.error").warning("port %d busy", 8080)
    (line,) = lines(stream)
    assert line["event"] == "port 8080 busy"
    assert line["level"] == "warning"


def test_registered_secrets_never_reach_a_line(stream: io.StringIO) -> None:
    hook = "https://hooks.slack.com/services/T000/B000/XXXXSECRET"
    log.register_secrets(["s3cret-pass", hook, None, "ab"])
    logger = log.get_logger("monitor.test")
    logger.error("delivery failed", error=f"POST {hook} answered 500", nested={"pw": "s3cret-pass"})
    try:
        raise RuntimeError("connect to postgresql://u:s3cret-pass@db/x failed")
    except RuntimeError:
        logger.exception("database down")
    logging.getLogger("httpx").error("request to %s", hook)
    text = stream.getvalue()
    assert "s3cret-pass" not in text
    assert "XXXXSECRET" not in text
    assert text.count("***") >= 4
    # Short strings are never treated as secrets: they would blank ordinary words.
    assert "ab" in log.scrub("about")


def test_console_rendering_on_request() -> None:
    out = io.StringIO()
    log.configure(json=False, stream=out)
    try:
        log.get_logger("monitor.test").info("started", port=8080)
    finally:
        structlog.reset_defaults()
        for handler in list(logging.getLogger().handlers):
            logging.getLogger().removeHandler(handler)
    assert "started" in out.getvalue()
    assert "port=8080" in out.getvalue()
    with pytest.raises(json.JSONDecodeError):
        json.loads(out.getvalue())
