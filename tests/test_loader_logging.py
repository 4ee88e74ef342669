"""The loader's own log lines reach a process that has not configured logging yet (SGLang loads plugins before
it configures logging): INFO and up, once, in SGLang's time format; a process that configured logging keeps it."""

import re
import subprocess
import sys

SCRIPT = """
import logging
{before}
from sglang_spec_plugins import loader
loader._visible_before_logging_is_configured()
ours = logging.getLogger("sglang_spec_plugins")
ours.info("summary")
logging.getLogger("sglang_spec_plugins.below").warning("below")
ours.debug("detail")
logging.getLogger("elsewhere").warning("not ours")
"""


def _stderr(before: str = "") -> str:
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(before=before)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stderr


def test_info_and_up_of_ours_reach_stderr_in_sglang_s_format_before_logging_is_configured():
    lines = _stderr().splitlines()
    assert [re.sub(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ", "[time] ", line) for line in lines] == [
        "[time] summary", "[time] below", "not ours"]  # Python's last resort prints the other logger's warning


def test_a_process_that_configured_logging_keeps_its_choice():
    lines = _stderr('logging.basicConfig(level=logging.WARNING, format="%(name)s|%(message)s")').splitlines()
    assert lines == ["sglang_spec_plugins.below|below", "elsewhere|not ours"]
