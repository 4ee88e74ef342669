"""The bad-input catalogue: every way an operator or a plugin author has been
seen to get a setup wrong, each with the message that must name its source.

A :class:`Case` is a plugins.toml (text or raw bytes), the drafter
distributions installed beside the two examples (each plugin's module is a
file under ``bad_plugins/``), the environment, and the message expected. ``ndt`` None: the fault shows while plugins load; an int:
it shows when SGLang asks for the widths at that ``speculative_num_draft_tokens``.
``test_bad_inputs.py`` runs each one through SGLang's own ``load_plugins()``
and through ``sglang-spec-plugins check``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Union


OK_TOML = '[plugins]\nenable = ["sbd"]\n'
"""A valid base: only the example SBD plugin enabled."""


@dataclass(frozen=True)
class Case:
    id: str
    expect: str
    """A regular expression the error message must match (``{cfg}`` is the plugins.toml path)."""
    toml: Optional[Union[str, bytes]] = OK_TOML
    dists: Dict[str, str] = field(default_factory=dict)
    """plugin name -> the file of its module, ``bad_plugins/<file>.py``; installed as the module ``<name>_mod`` of
    ``<name>-drafter==1.0``, whose entry point ``<name>`` names it (or ``targets[name]``)."""
    env: Dict[str, str] = field(default_factory=dict)
    ndt: Optional[int] = None
    setup: Optional[Callable[[Path], Dict[str, str]]] = None
    """Prepares files under the test's directory; returns environment to set (``{}``: none)."""
    start: Optional[Dict[str, object]] = None
    """``ServerArgs`` fields: the fault shows when SGLang resolves these server arguments (its own speculative
    handler calls the algorithm's validate_server_args), before any weights load; ``check`` gets the same as flags."""
    since: Optional[str] = None
    """The first SGLang release the case applies to (older ones are skipped)."""
    until: Optional[str] = None
    """The last SGLang release the case applies to (newer ones are skipped)."""
    gpu: Optional[str] = None
    """``"sm90"``: the machine reports a Hopper GPU (SGLang's ``is_sm90_supported``, a GPU-only name, stands in)."""
    targets: Dict[str, str] = field(default_factory=dict)
    """plugin name -> ``module:attr`` its entry point names (default: the module ``<name>_mod``)."""
    algorithm: str = "BAD"
    """The algorithm whose widths an ``ndt`` case asks for."""


BAD_PLUGINS = Path(__file__).with_name("bad_plugins")
"""The plugin modules of the cases, one file each (``bad_plugins/<name>.py``)."""


PARTS = "bad_plugin_parts"
"""What the plugin modules share (``bad_plugins/bad_plugin_parts.py``), a module installed beside each of them."""


def bad_plugin(name: str) -> str:
    """The source of ``bad_plugins/<name>.py``."""
    return (BAD_PLUGINS / f"{name}.py").read_text()


def plugin_modules(module: str, source: str) -> Dict[str, str]:
    """The modules of a plugin whose module ``module`` is ``source``: it and :data:`PARTS` (module -> source)."""
    return {module: source, PARTS: bad_plugin(PARTS)}


def config_env(make: Callable[[Path], Path]) -> Callable[[Path], Dict[str, str]]:
    return lambda root: {"SGLANG_SPEC_PLUGINS_CONFIG": str(make(root))}


def local_file(make: Callable[[Path], None]) -> Callable[[Path], Dict[str, str]]:
    """``./plugins.toml`` in the working directory, no environment variable."""

    def setup(root: Path) -> Dict[str, str]:
        make(root / "plugins.toml")
        return {}

    return setup


def _link_to(path: Path, target: Path) -> Path:
    path.symlink_to(target)
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def agreement_of(records: Dict[str, object]) -> Callable[[Path], Dict[str, str]]:
    """A server agreement that another, running process of the same server (this
    test process's parent, an ancestor as a launcher is) already wrote, named in
    the environment: ``records`` maps an answer (``"fingerprint"``, or
    ``"ALGORITHM: call"``) to the value recorded for it."""

    def setup(root: Path) -> Dict[str, str]:
        from sglang_spec_plugins import agreement

        where = _agreement_dir(root)
        parent = os.getppid()
        for answer, value in records.items():
            agreement.record_file(where, answer).write_text(json.dumps({
                "answer": answer, "value": value, "process": f"pid {parent} (MainProcess, launch_server.py)",
                "pid": parent, "started": agreement.started(parent)}))
        return {"SGLANG_SPEC_PLUGINS_CONFIG": str(root / "plugins.toml"), "SGLANG_SPEC_PLUGINS_AGREEMENT": str(where)}

    return setup


def agreement_holding(files: Dict[str, Optional[str]], dead: bool = False) -> Callable[[Path], Dict[str, str]]:
    """A reused agreement directory holding ``files`` (answer -> the text of the
    file it is recorded in; None: a directory in its place); ``dead``: ``{pid}``
    in a text is the pid of a process that has exited (a record an earlier
    server left)."""

    def setup(root: Path) -> Dict[str, str]:
        from sglang_spec_plugins import agreement

        where = _agreement_dir(root)
        pid = _exited_pid() if dead else os.getppid()
        for answer, text in files.items():
            path = agreement.record_file(where, answer)
            if text is None:
                path.mkdir()
            else:
                path.write_text(text.replace("{pid}", str(pid)))
        return {"SGLANG_SPEC_PLUGINS_CONFIG": str(root / "plugins.toml"), "SGLANG_SPEC_PLUGINS_AGREEMENT": str(where)}

    return setup


def _agreement_dir(root: Path) -> Path:
    (root / "plugins.toml").write_text(WIDTH)
    where = root / "agreement"
    where.mkdir()
    return where


def _exited_pid() -> int:
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def agreement_file(root: Path) -> Dict[str, str]:
    """``SGLANG_SPEC_PLUGINS_AGREEMENT`` naming a regular file."""
    (root / "plugins.toml").write_text(WIDTH)
    (root / "agreement").write_text("notes\n")
    return {"SGLANG_SPEC_PLUGINS_CONFIG": str(root / "plugins.toml"), "SGLANG_SPEC_PLUGINS_AGREEMENT": str(root / "agreement")}


LAUNCHER = r"pid \d+ \(MainProcess, launch_server.py\)"
"""How the messages name the process that wrote :func:`agreement_of`'s records."""


def _dangling(path: Path) -> Path:
    path.symlink_to(path.parent / "nowhere.toml")
    return path


FLAGS = {"speculative_algorithm": "BAD", "speculative_num_draft_tokens": 4, "disable_overlap_schedule": True}
"""The operator's arguments for the start-up cases (SGLang's names)."""

DP_ATTENTION = {"enable_dp_attention": True, "dp_size": 2, "tp_size": 2}
TRTLLM_MHA_VERIFY = {"prefill_attention_backend": "flashinfer", "decode_attention_backend": "trtllm_mha",
                     "speculative_attention_mode": "decode"}
"""TARGET_VERIFY through trtllm_mha on an SM90 GPU, as SGLang accepts it there (its prefill backend only on SM100)."""
"""Attention data parallelism over two ranks (``check`` gets ``--enable-dp-attention``)."""

BAD = "[plugins]\nenable = ['sbd', 'bad']\n"
CONTINUATIONS = Path(__file__).resolve().parents[2] / "examples/controlled_acceptance_drafter/tests/continuations.json"
"""The CONTROLLED_ACCEPTANCE example's recorded continuations (its conformance settings')."""
AGREED = r"\S+/agreement/"
"""The agreement directory of :func:`agreement_holding` (its path)."""
REMOVE_IT = (r"no process writes one \(records are written whole\): remove it, or the directory \S+/agreement, or unset "
             r"SGLANG_SPEC_PLUGINS_AGREEMENT")
NOT_WITH_DP = (r"which are not served with DP attention \(--enable-dp-attention or --attn-dp-size above 1; SGLang pads every "
               r"DP rank's decode batch to the largest rank's\)")
SKIPPING = "[plugins]\nenable = ['sbd', 'dflash_block', 'bad']\non_error = 'skip'\n"
WIDTH = "[plugins]\nenable = ['bad']\n"
BY_BATCH = "[algorithms.BAD]\nmax_tokens_per_req = 6\nwidths_by_batch_size = {1 = 6, 2 = 4, 4 = 2}\n"
"""Widths by batch size at ndt 4 (FLAGS): 6 tokens per request for one request, 4 for 2-3, 2 from 4."""

def _drafts() -> Dict[str, Path]:
    """Draft checkpoints with one fault each, in DFlash's layout for the tiny Llama otherwise (a folder under the
    system's temporary folder, made once per process): ``list``, a config.json holding a list; ``layers``,
    ``dflash_config.target_layer_ids`` an int."""
    import tempfile

    from sglang_spec_plugins.testing.draft_checkpoint import dflash_draft
    from sglang_spec_plugins.testing.scheduler_start import TINY_LLAMA

    root = Path(tempfile.gettempdir()) / f"sglang-spec-plugins-tests-drafts-{os.getpid()}"
    found = {"list": root / "list", "layers": root / "layers"}
    if not (found["layers"] / "config.json").exists():
        dflash_draft(found["layers"], TINY_LLAMA, block_size=4, mask_token_id=255, target_layer_ids=[0])
        config = json.loads((found["layers"] / "config.json").read_text())
        config["dflash_config"]["target_layer_ids"] = 0
        (found["layers"] / "config.json").write_text(json.dumps(config))
        found["list"].mkdir(parents=True, exist_ok=True)
        (found["list"] / "config.json").write_text("[1, 2]")
    return found


DRAFTS = _drafts()


CASES = [
    # --- plugins.toml: the file itself ---
    Case("toml syntax", r"{cfg}: not valid TOML: .*\(at line 2, column \d+\)", "[plugins]\nenable = [sbd]\n"),
    Case("not utf-8", r"{cfg}: not UTF-8 text: byte 0xff at line 2, column 15", b"[plugins]\non_error = 'sk\xffip'\n"),
    Case("latin-1 text", r"{cfg}: not UTF-8 text: byte 0xe9 at line 2", "[algorithms.SBD]\nnote = 'caf\u00e9'\n".encode("latin-1")),
    Case("nested arrays", r"{cfg}: arrays or tables nested more than 32 levels deep", "[algorithms.SBD]\nx = " + "[" * 2000 + "]" * 2000 + "\n"),
    Case("nested tables", r"{cfg}: arrays or tables nested more than 32 levels deep", "[algorithms.SBD]\nx = " + "{a = " * 40 + "1" + "}" * 40 + "\n"),
    Case("top-level key", r"{cfg}: unknown top-level key 'plugin' \(expected \[plugins\] and \[algorithms.NAME\] tables\)", "plugin = 'sbd'\n"),
    Case("plugins not a table", r"{cfg}: \[plugins\] must be a table", "plugins = 3\n"),
    Case("plugins unknown key", r"{cfg}: \[plugins\] unknown key 'enabled' \(known: enable, disable, on_error\)", "[plugins]\nenabled = ['sbd']\n"),
    Case("enable not a list", r"{cfg}: \[plugins\] enable must be a list of plugin names \(strings\), got 'sbd'", "[plugins]\nenable = 'sbd'\n"),
    Case("enable holds a number", r"{cfg}: \[plugins\] enable must be a list of plugin names \(strings\), got \['sbd', 1\]", "[plugins]\nenable = ['sbd', 1]\n"),
    Case("enable holds an empty name", r"{cfg}: \[plugins\] enable must be a list of plugin names \(strings\), got \[''\]", "[plugins]\nenable = ['']\n"),
    Case("disable not a list", r"{cfg}: \[plugins\] disable must be a list of plugin names", "[plugins]\ndisable = {x = 1}\n"),
    Case("on_error unknown", r"{cfg}: \[plugins\] on_error must be one of 'fail', 'skip', got 'maybe'", "[plugins]\non_error = 'maybe'\n"),
    Case("on_error not a string", r"{cfg}: \[plugins\] on_error must be one of 'fail', 'skip', got \['skip'\]", "[plugins]\non_error = ['skip']\n"),
    Case("enabled and disabled", r"{cfg}: \[plugins\] plugin 'sbd' is in both enable and disable", "[plugins]\nenable = ['sbd']\ndisable = ['sbd']\n"),
    Case("enable unknown plugin", r"{cfg}: \[plugins\] enable: unknown plugin 'sdb' \(did you mean 'sbd'\? \d+ installed\)", "[plugins]\nenable = ['sdb']\n"),
    Case("disable unknown plugin", r"{cfg}: \[plugins\] disable: unknown plugin 'dflash' \(did you mean 'dflash_block'\? \d+ installed\)", "[plugins]\ndisable = ['dflash']\n"),
    Case("enable a string, nothing imported", r"\A{cfg}: \[plugins\] enable must be a list of plugin names \(strings\), got 'sbd'\Z",
         "[plugins]\nenable = 'sbd'\n", {"bad": "must_not_be_imported"}),
    Case("enabled instead of enable, nothing imported", r"\A{cfg}: \[plugins\] unknown key 'enabled' \(known: enable, disable, on_error\)\Z",
         "[plugins]\nenabled = ['sbd']\n", {"bad": "must_not_be_imported"}),
    Case("top-level plugins array, nothing imported", r"\A{cfg}: \[plugins\] must be a table\Z",
         "plugins = ['sbd']\n", {"bad": "must_not_be_imported"}),
    Case("algorithms not a table", r"{cfg}: \[algorithms\] must be a table of \[algorithms.NAME\] tables", "algorithms = 1\n"),
    Case("algorithm not a table", r"{cfg}: \[algorithms.SBD\] must be a table", "[algorithms]\nSBD = 1\n"),
    Case("reserved name", r"{cfg}: \[algorithms.EAGLE\] 'EAGLE' is a built-in SGLang algorithm name", "[algorithms.EAGLE]\n"),
    Case("reserved alias", r"{cfg}: \[algorithms.nextn\] 'NEXTN' is a built-in SGLang algorithm name", "[algorithms.nextn]\n"),
    Case("non-ascii table name", r"{cfg}: \[algorithms.SBD\u00c9\] is not a valid algorithm name \(ASCII letters", '[algorithms."SBD\u00c9"]\n'),
    Case("dash in table name", r"{cfg}: \[algorithms.my-algo\] is not a valid algorithm name", '[algorithms."my-algo"]\n'),
    Case("plugin key not a string", r"{cfg}: \[algorithms.SBD\] plugin must be a plugin name \(string\), got 3", "[algorithms.SBD]\nplugin = 3\n"),
    Case("plugin key empty", r"{cfg}: \[algorithms.SBD\] plugin must be a plugin name \(string\), got ''", "[algorithms.SBD]\nplugin = ''\n"),
    Case("enabled not a bool", r"{cfg}: \[algorithms.SBD\] enabled must be true or false, got 'no'", "[algorithms.SBD]\nenabled = 'no'\n"),
    Case("cap zero", r"{cfg}: \[algorithms.SBD\] max_tokens_per_req must be a positive integer, got 0", "[algorithms.SBD]\nmax_tokens_per_req = 0\n"),
    Case("cap a string", r"{cfg}: \[algorithms.SBD\] max_tokens_per_req must be a positive integer, got '16'", "[algorithms.SBD]\nmax_tokens_per_req = '16'\n"),
    Case("cap a bool", r"{cfg}: \[algorithms.SBD\] max_tokens_per_req must be a positive integer, got True", "[algorithms.SBD]\nmax_tokens_per_req = true\n"),
    Case("cap a float", r"{cfg}: \[algorithms.SBD\] max_tokens_per_req must be a positive integer, got 8.0", "[algorithms.SBD]\nmax_tokens_per_req = 8.0\n"),
    Case("cap huge", r"{cfg}: \[algorithms.SBD\] max_tokens_per_req = 9223372036854775807 is above 1024, the largest verify width accepted \(SGLang sizes KV reservation and CUDA graphs by it\)",
         "[algorithms.SBD]\nmax_tokens_per_req = 9223372036854775807\n"),
    Case("cap just above the limit", r"{cfg}: \[algorithms.SBD\] max_tokens_per_req = 1025 is above 1024", "[algorithms.SBD]\nmax_tokens_per_req = 1025\n"),
    Case("widths by batch not a table", r"{cfg}: \[algorithms.SBD\] widths_by_batch_size: expected a non-empty mapping \{min_batch_size: width\}, got \[16, 8\]",
         "[algorithms.SBD]\nwidths_by_batch_size = [16, 8]\n"),
    Case("widths by batch without 1", r"{cfg}: \[algorithms.SBD\] widths_by_batch_size: the smallest bucket must start at batch size 1 \(got 8\)",
         "[algorithms.SBD]\nwidths_by_batch_size = {8 = 8, 64 = 4}\n"),
    Case("widths by batch bad key", r"{cfg}: \[algorithms.SBD\] widths_by_batch_size: key 'many' is not a batch size",
         "[algorithms.SBD]\nwidths_by_batch_size = {1 = 8, many = 4}\n"),
    Case("widths by batch zero width", r"{cfg}: \[algorithms.SBD\] widths_by_batch_size: width for batch size 64 must be a positive integer, got 0",
         "[algorithms.SBD]\nwidths_by_batch_size = {1 = 8, 64 = 0}\n"),
    Case("widths by batch empty list", r"{cfg}: \[algorithms.SBD\] widths_by_batch_size: widths for batch size 8 must not be empty",
         "[algorithms.SBD]\nwidths_by_batch_size = {1 = [2, 8], 8 = []}\n"),
    Case("widths by acceptance unknown setting", r"{cfg}: \[algorithms.SBD\] widths_by_acceptance: unknown setting 'interval' \(did you mean 'interval_steps'\?\)",
         "[algorithms.SBD]\nwidths_by_acceptance = {interval = 4}\n"),
    Case("verify_widths key", r"{cfg}: \[algorithms.SBD\] 'verify_widths' is not a key; widths per batch size are widths_by_batch_size",
         "[algorithms.SBD]\nverify_widths = {1 = 16, 8 = 8}\n"),
    Case("misspelled cap", r"{cfg}: \[algorithms.SBD\] 'max_token_per_req' looks like a misspelling of the framework key 'max_tokens_per_req'", "[algorithms.SBD]\nmax_token_per_req = 8\n"),
    Case("cap upper case", r"{cfg}: \[algorithms.SBD\] 'MAX_TOKENS_PER_REQ' looks like a misspelling of the framework key 'max_tokens_per_req'", "[algorithms.SBD]\nMAX_TOKENS_PER_REQ = 8\n"),
    Case("cap camel case", r"{cfg}: \[algorithms.SBD\] 'maxTokensPerReq' looks like a misspelling of the framework key 'max_tokens_per_req'", "[algorithms.SBD]\nmaxTokensPerReq = 8\n"),
    Case("cap shortened", r"{cfg}: \[algorithms.SBD\] 'max_tokens' looks like a misspelling of the framework key 'max_tokens_per_req'", "[algorithms.SBD]\nmax_tokens = 8\n"),
    Case("misspelled plugin key", r"{cfg}: \[algorithms.SBD\] 'plugn' looks like a misspelling of the framework key 'plugin'", "[algorithms.SBD]\nplugn = 'sbd'\n"),
    Case("two tables one name", r"{cfg}: \[algorithms.SBD\] names the same algorithm as another table", "[algorithms.sbd]\n[algorithms.SBD]\n"),
    Case("table names unknown plugin", r"{cfg}: \[algorithms.SBD\] plugin: unknown plugin 'sdb' \(did you mean 'sbd'\? \d+ installed\)", "[algorithms.SBD]\nplugin = 'sdb'\n"),
    Case("plugin does not offer it", r"{cfg}: \[algorithms.SBD\] plugin: plugin 'dflash_block' does not offer SBD \(offered by: sbd\)", "[algorithms.SBD]\nplugin = 'dflash_block'\n"),
    Case("unknown algorithm", r"{cfg}: \[algorithms.SBDX\]: unknown algorithm; no installed plugin offers it", "[algorithms.SBDX]\n"),
    Case("typo in a table name", r"\A{cfg}: \[algorithms.SDB\]: unknown algorithm; no installed plugin offers it \(did you mean SBD, offered by 'sbd'\?\); nor does the source of the \d+ installed plugin\(s\) not loaded name it",
         "[plugins]\nenable = ['sbd']\n[algorithms.SDB]\nverify_width = 4\n"),
    Case("unknown plugin among many", r"{cfg}: \[plugins\] enable: unknown plugin 'drafter_1O' \(did you mean 'drafter_1' or 'drafter_11' or 'drafter_10'\? \d+ installed\)\Z",
         "[plugins]\nenable = ['drafter_1O']\n", {f"drafter_{i}": "offers_d_by_module_name" for i in range(12)}),
    Case("offered twice", r"{cfg}: \[algorithms.SBD\] plugin: algorithm SBD is offered by several plugins \(bad, sbd\); set plugin",
         "[plugins]\n", {"bad": "offered_twice"}),
    Case("many mistakes at once",
         r"{cfg}: \[plugins\] on_error must be one of .*\n{cfg}: \[algorithms.SBD\] max_tokens_per_req must be .*\n{cfg}: \[plugins\] enable: unknown plugin 'sdb'",
         "[plugins]\non_error = 'never'\nenable = ['sdb', 'sbd']\n[algorithms.SBD]\nmax_tokens_per_req = -1\n"),
    # --- where plugins.toml is ---
    Case("config env missing", r"SGLANG_SPEC_PLUGINS_CONFIG=.*none.toml: no such file", None, setup=config_env(lambda root: root / "none.toml")),
    Case("config env a directory", r"SGLANG_SPEC_PLUGINS_CONFIG=.*conf.d: not a regular file: a directory", None,
         setup=config_env(lambda root: (root / "conf.d").mkdir() or root / "conf.d")),
    Case("config env dangling link", r"SGLANG_SPEC_PLUGINS_CONFIG=.*plugins.toml: a symlink to '.*nowhere.toml', which does not exist", None,
         setup=config_env(lambda root: _dangling(root / "plugins.toml"))),
    Case("config env a symlink to a directory", r"SGLANG_SPEC_PLUGINS_CONFIG=.*plugins.toml: a symlink to '.*conf.d', which is a directory; plugins.toml must be a regular file", None,
         setup=config_env(lambda root: _link_to(root / "plugins.toml", (root / "conf.d").mkdir() or root / "conf.d"))),
    Case("config env a symlink to a FIFO", r"SGLANG_SPEC_PLUGINS_CONFIG=.*plugins.toml: a symlink to '.*pipe', which is a FIFO \(named pipe\); plugins.toml must be a regular file", None,
         setup=config_env(lambda root: _link_to(root / "plugins.toml", _fifo(root / "pipe")))),
    Case("local file a FIFO", r"plugins.toml: not a regular file: a FIFO \(named pipe\)", None, setup=local_file(_fifo)),
    Case("config env name too long", r"SGLANG_SPEC_PLUGINS_CONFIG=.*: cannot be read: File name too long", None,
         setup=config_env(lambda root: root / ("x" * 300))),
    Case("local file a directory", r"plugins.toml: not a regular file: a directory; plugins.toml must be a regular file", None, setup=local_file(lambda p: p.mkdir())),
    Case("local file dangling link", r"plugins.toml: a symlink to '.*nowhere.toml', which does not exist", None, setup=local_file(_dangling)),
    # --- the environment ---
    Case("allow-list of nothing", r"SGLANG_SPEC_PLUGINS=' , ' names no plugin; unset it", env={"SGLANG_SPEC_PLUGINS": " , "}),
    Case("allow-list unknown", r"SGLANG_SPEC_PLUGINS=sbd,sdb: unknown plugin 'sdb' \(did you mean 'sbd'\? \d+ installed\)", env={"SGLANG_SPEC_PLUGINS": "sbd,sdb"}),
    # --- plugin distributions that fail to load ---
    Case("import error", r"plugin 'bad' \(bad-drafter==1.0\): cannot import bad_mod: ImportError: needs flash_attn", BAD,
         {"bad": "import_error"}),
    Case("sys.exit at import", r"plugin 'bad' \(bad-drafter==1.0\): cannot import bad_mod: SystemExit \(it called sys.exit\(3\)\)", BAD,
         {"bad": "exits_at_import"}),
    Case("unknown hook", r"plugin 'bad' \(bad-drafter==1.0\): breaks the hook contract: .*unknown hook 'sgl_spec_verify_widht'", BAD,
         {"bad": "unknown_hook"}),
    Case("misspelt optional hook", r"plugin 'bad' \(bad-drafter==1.0\): breaks the hook contract: unknown hook 'sgl_spec_verify_widht' \(did you mean 'sgl_spec_verify_width'\?\), marked optionalhook=True; every @hookimpl must implement one of the 5 hooks of this contract", BAD,
         {"bad": "misspelt_optional_hook"}),
    Case("hook argument unknown", r"plugin 'bad' \(bad-drafter==1.0\): breaks the hook contract: .*sgl_spec_verify_width\(algorithm, ndt\); Argument\(s\) \{'ndt'\} are declared in the hookimpl but can not be found in the hookspec", BAD,
         {"bad": "hook_argument_unknown"}),
    Case("pytest.skip at import", r"plugin 'bad' \(bad-drafter==1.0\): cannot import bad_mod: Skipped: needs a GPU \(a BaseException that is not an Exception\)", BAD,
         {"bad": "skips_at_import"}),
    Case("BaseException from algorithms", r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_algorithms raised bad_mod.Stop: no \(a BaseException that is not an Exception\)", BAD,
         {"bad": "baseexception_from_algorithms"}),
    Case("BaseException from the draft hook", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: sgl_spec_draft_may_verify\(\) raised bad_mod.Stop: no \(a BaseException", BAD,
         {"bad": "baseexception_from_the_draft_hook"}),
    Case("hook argument with a default", r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_verify_width gives settings a default value; pluggy never passes an argument that has a default, so the hook would always see the default \(e.g. `settings=\{\}` ignores plugins.toml\): remove the default", BAD,
         {"bad": "hook_argument_with_a_default"}),
    Case("entry point names a function", r"plugin 'bad' \(bad-drafter==1.0\): the entry point bad = 'bad_mod:sgl_spec_algorithms' names the function sgl_spec_algorithms; an entry point must name a module \('bad_mod'\) or an object holding @hookimpl functions", BAD,
         {"bad": "offers_bad"}, targets={"bad": "bad_mod:sgl_spec_algorithms"}),
    Case("entry point names a class", r"plugin 'bad' \(bad-drafter==1.0\): the entry point bad = 'bad_mod:Hooks' names the class Hooks; an entry point must name a module \('bad_mod'\) or an object holding @hookimpl functions \(an instance, not its class\)", BAD,
         {"bad": "entry_point_names_a_class"}, targets={"bad": "bad_mod:Hooks"}),
    Case("plugin with no hookimpl", r"plugin 'bad' \(bad-drafter==1.0\): offers nothing: its entry point bad_mod is <module 'bad_mod' from '.*bad_mod.py'>, a module with no @hookimpl function; it must name a module or an object holding @hookimpl functions, sgl_spec_algorithms among them", BAD,
         {"bad": "plugin_with_no_hookimpl"}),
    Case("entry point resolves to an int", r"plugin 'bad' \(bad-drafter==1.0\): offers nothing: its entry point bad_mod:VALUE is 42, a int with no @hookimpl function", BAD,
         {"bad": "entry_point_resolves_to_an_int"}, targets={"bad": "bad_mod:VALUE"}),
    Case("plugin offers no algorithm", r"plugin 'bad' \(bad-drafter==1.0\): offers nothing: sgl_spec_algorithms returned \[\]; a plugin with no algorithm to offer here must be left out", BAD,
         {"bad": "plugin_offers_no_algorithm"}),
    Case("plugin without sgl_spec_algorithms", r"plugin 'bad' \(bad-drafter==1.0\): offers nothing: it does not implement sgl_spec_algorithms, so its other hooks \(sgl_spec_verify_width\) answer for no algorithm of its own", BAD,
         {"bad": "plugin_without_sgl_spec_algorithms"}),
    Case("algorithms not a list", r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_algorithms must return a list of AlgorithmSpec, got 'BAD'", BAD,
         {"bad": "algorithms_not_a_list"}),
    Case("algorithms a generator", r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_algorithms must return a list of AlgorithmSpec, got a generator \(it is consumed once; return a list\)$", BAD,
         {"bad": "algorithms_a_generator"}),
    Case("algorithms of dicts", r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_algorithms returned \{'name': 'BAD'\}, not an AlgorithmSpec", BAD,
         {"bad": "algorithms_of_dicts"}),
    Case("offers a reserved name", r"plugin 'bad' \(bad-drafter==1.0\): algorithm name 'EAGLE3' is reserved by SGLang", BAD, {"bad": "offers_a_reserved_name"}),
    Case("offers a dashed name", r"plugin 'bad' \(bad-drafter==1.0\): algorithm name 'my-algo' is not a valid name", BAD, {"bad": "offers_a_dashed_name"}),
    Case("offers a non-ascii name", r"plugin 'bad' \(bad-drafter==1.0\): algorithm name '\u00c4LGO' is not a valid name \(ASCII", BAD, {"bad": "offers_a_non_ascii_name"}),
    Case("offers a name twice", r"plugin 'bad' \(bad-drafter==1.0\): offers algorithm 'X' twice", BAD,
         {"bad": "offers_a_name_twice"}),
    Case("factory not callable", r"plugin 'bad' \(bad-drafter==1.0\): algorithm X: worker_factory is not callable", BAD,
         {"bad": "factory_not_callable"}),
    Case("validator not callable", r"plugin 'bad' \(bad-drafter==1.0\): algorithm X: validate_server_args is not callable", BAD,
         {"bad": "validator_not_callable"}),
    Case("overlap not a bool", r"plugin 'bad' \(bad-drafter==1.0\): algorithm X: supports_overlap must be a bool", BAD,
         {"bad": "overlap_not_a_bool"}),
    Case("unknown capability", r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_algorithms raised ValueError: AlgorithmSpec 'X': unknown capability 'supports_ragged_verify' \(known: has_draft_kv, ", BAD,
         {"bad": "unknown_capability"}),
    Case("capability not a bool", r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_algorithms raised ValueError: AlgorithmSpec 'X': capability has_draft_kv must be True or False, got 0", BAD,
         {"bad": "capability_not_a_bool"}),
    Case("algorithms raises", r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_algorithms raised KeyError: 'cfg'", BAD,
         {"bad": "algorithms_raises"}),
    Case("algorithms exits", r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_algorithms raised SystemExit \(it called sys.exit\(2\)\)", BAD,
         {"bad": "algorithms_exits"}),
    Case("new-style wrapper", r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_verify_width is a hook wrapper .*; this contract has no wrappers", BAD,
         {"bad": "new_style_wrapper"}),
    Case("old-style wrapper", r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_draft_may_verify is a hook wrapper", BAD,
         {"bad": "old_style_wrapper"}),
    # --- answers that need no num_draft_tokens, checked while loading ---
    Case("draft hook raises", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: sgl_spec_draft_may_verify\(\) raised RuntimeError: no config", BAD,
         {"bad": "draft_hook_raises"}),
    Case("draft answer not a bool", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: sgl_spec_draft_may_verify\(\) returned 'yes', a str, not a bool; it must be a bool", BAD,
         {"bad": "draft_answer_not_a_bool"}),
    Case("wrong-case comparison", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: sgl_spec_draft_may_verify\(\) returned None for its own algorithm BAD; hooks receive the name upper case", BAD,
         {"bad": "wrong_case_comparison"}),
    Case("tree verified by the draft worker", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: verify_shape='tree' and sgl_spec_draft_may_verify\(\) returned True, but SGLang captures a draft worker's TARGET_VERIFY only as a causal chain", BAD,
         {"bad": "tree_verified_by_the_draft_worker"}),
    Case("answers for every algorithm", r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_draft_may_verify answered True for algorithm SBD, which plugin 'sbd' owns", BAD,
         {"bad": "draft_answers_for_every_algorithm"}),
    Case("width for others", r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_verify_width answered 2 for algorithm SBD, which plugin 'sbd' owns", BAD,
         {"bad": "width_for_others"}),
    Case("max raises for others", r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_max_verify_width\(algorithm='SBD', num_draft_tokens=16\) raised KeyError: 'SBD'", BAD,
         {"bad": "max_raises_for_others"}),
    Case("name claimed twice", r"plugin 'sbd': the plugin name is claimed by several installed distributions: sbd-drafter==1.0 \(sbd_mod\), sglang-spec-example-sbd==0.1.0 \(sbd_drafter.plugin\); uninstall all but one",
         OK_TOML, {"sbd": "offers_sbd2"}),
    # --- found when SGLang resolves its server arguments, before any weights load (and by check) ---
    Case("worker forward lacks **kwargs", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: .*Worker.forward_batch_generation\(self, batch\) cannot take what SGLang [0-9.post]+ passes, \(batch, .*\): got an unexpected keyword argument", WIDTH,
         {"bad": "worker_forward_lacks_kwargs"}, start=FLAGS, since="0.5.13"),
    Case("worker lacks members", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: .*Worker lacks .*which SGLang [0-9.post]+ uses on every speculative worker; build on sglang_spec_plugins.worker.worker_base\(\)", WIDTH,
         {"bad": "offers_bad"}, start=FLAGS),
    Case("factory returns an instance", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: the worker factory returned <object object at 0x[0-9a-f]+>, not a class; SGLang [0-9.post]+ instantiates what it returns", WIDTH,
         {"bad": "factory_returns_an_instance"}, start=FLAGS),
    Case("factory raises", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: worker_factory raised ModuleNotFoundError: No module named 'flash_attn_not_installed'", WIDTH,
         {"bad": "factory_raises"}, start=FLAGS),
    Case("overlap flag missing", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: supports_overlap=False: SGLang [0-9.post]+ refuses to start it without --disable-overlap-schedule", WIDTH,
         {"bad": "startable"}, start=dict(FLAGS, disable_overlap_schedule=False)),
    Case("fa3 below ndt", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: --attention-backend fa3 on the target worker at width 2 \(chain, ndt 4\) on SGLang [0-9.post]+ is refused: lays the target worker's TARGET_VERIFY out at speculative_num_draft_tokens", WIDTH,
         {"bad": "fa3_below_ndt"}, start=dict(FLAGS, attention_backend="fa3")),
    Case("widths by batch on an unproven backend", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: --attention-backend torch_native on the target worker at width 4 \(chain, ndt 4\) on SGLang [0-9.post]+ is refused: is not proven with widths by batch size \(\{1 = 4, 8 = 4\}; proven on: aiter, flashinfer, triton, trtllm_mha\)",
         WIDTH + "[algorithms.BAD]\nwidths_by_batch_size = {1 = 4, 8 = 4}\n", {"bad": "startable"},
         start=dict(FLAGS, attention_backend="torch_native")),
    Case("widths by batch on triton at ndt", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: --attention-backend triton on the target worker at width 2 \(chain, ndt 4\) on SGLang [0-9.post]+ is refused: lays TARGET_VERIFY out at speculative_num_draft_tokens",
         WIDTH + BY_BATCH, {"bad": "startable"}, start=dict(FLAGS, attention_backend="triton"),
         until="0.5.16"),
    Case("trtllm_mha on SM90 without the XQA mask", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: --attention-backend trtllm_mha on the target worker at width 4 \(chain, ndt 4\) on SGLang [0-9.post]+ is refused: runs TARGET_VERIFY on this SM90 \(Hopper\) GPU through flashinfer's XQA kernel, which needs a spec-decode mask for more than one token per request, and this release passes none .*; choose another --attention-backend \(flashinfer serves plugin algorithms on every release\) or SGLang 0.5.21\+", WIDTH,
         {"bad": "startable"}, start=dict(FLAGS, **TRTLLM_MHA_VERIFY), until="0.5.20", gpu="sm90"),
    Case("validator AssertionError", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: validate_server_args refused --speculative-num-draft-tokens 4: AssertionError: blocks of 16 only", WIDTH,
         {"bad": "validator_assertionerror"}, start=FLAGS),
    Case("widths by batch with DP attention", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: \[algorithms.BAD\] widths_by_batch_size in {cfg} gives widths by batch size \{1 = 4, 8 = 2\}, " + NOT_WITH_DP,
         WIDTH + "[algorithms.BAD]\nwidths_by_batch_size = {1 = 4, 8 = 2}\n", {"bad": "startable"},
         start=dict(FLAGS, **DP_ATTENTION)),
    Case("widths hook with DP attention", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: sgl_spec_widths_by_batch_size\(num_draft_tokens=4, is_draft_worker=False\) gives widths by batch size \{1 = 4, 16 = 2\}, " + NOT_WITH_DP,
         WIDTH, {"bad": "widths_hook_with_dp_attention"},
         start=dict(FLAGS, **DP_ATTENTION)),
    # --- widths, checked when SGLang asks at a num_draft_tokens ---
    Case("widths by acceptance without widths to choose from",
         r"\[algorithms.BAD\] widths_by_acceptance in {cfg}: the controller chooses each step's width among its batch-size bucket's widths, "
         r"but \[algorithms.BAD\] widths_by_batch_size in {cfg} gives \{1 = 4, 8 = 2\} at speculative_num_draft_tokens=4",
         WIDTH + "[algorithms.BAD]\nwidths_by_batch_size = {1 = 4, 8 = 2}\nwidths_by_acceptance = true\n",
         {"bad": "offers_bad_without_overlap"}, ndt=4),
    Case("width zero", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: sgl_spec_verify_width\(num_draft_tokens=16, is_draft_worker=False\) returned 0; it must be an int from 1 to the maximum width 16",
         WIDTH, {"bad": "width_zero"}, ndt=16),
    Case("width above max", r"sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=False\) returned 12; it must be an int from 1 to the maximum width 8",
         WIDTH, {"bad": "width_above_max"}, ndt=8),
    Case("width a float", r"returned 4.0, a float, not an int; it must be an int from 1 to the maximum width 8", WIDTH, {"bad": "width_a_float"}, ndt=8),
    Case("width a bool", r"returned True, a bool, not an int; it must be an int", WIDTH, {"bad": "width_a_bool"}, ndt=8),
    Case("width a string", r"returned '4', a str, not an int; it must be an int", WIDTH, {"bad": "width_a_string"}, ndt=8),
    Case("width changes", r"algorithm BAD: sgl_spec_verify_width\(num_draft_tokens=16, is_draft_worker=False\) answered \d+, then \d+ for the same arguments; answers must be pure",
         WIDTH, {"bad": "width_changes"}, ndt=16),
    Case("width wrong case", r"sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=False\) returned None for its own algorithm BAD",
         WIDTH, {"bad": "width_wrong_case"}, ndt=8),
    Case("draft width only", r"sgl_spec_verify_width\(num_draft_tokens=16, is_draft_worker=True\) returned 32; it must be an int from 1 to the maximum width 16",
         WIDTH, {"bad": "draft_width_only"}, ndt=16),
    Case("max below ndt", r"sgl_spec_max_verify_width\(num_draft_tokens=16\) returned 8; the maximum width must be an int >= num_draft_tokens=16",
         WIDTH, {"bad": "max_below_ndt"}, ndt=16),
    Case("max above cap", r"sgl_spec_max_verify_width\(num_draft_tokens=8\) returned 32, above \[algorithms.BAD\] max_tokens_per_req = 16 in {cfg}",
         WIDTH + "[algorithms.BAD]\nmax_tokens_per_req = 16\n", {"bad": "max_above_cap"}, ndt=8),
    Case("max unbounded", r"sgl_spec_max_verify_width\(num_draft_tokens=8\) returned 1000000, above 64, the most allowed without a cap",
         WIDTH, {"bad": "max_unbounded"}, ndt=8),
    Case("cap below ndt", r"\[algorithms.BAD\] max_tokens_per_req = 4 in {cfg} is below speculative_num_draft_tokens=8; raise it to at least 8",
         WIDTH + "[algorithms.BAD]\nmax_tokens_per_req = 4\n", {"bad": "width_2"}, ndt=8),
    Case("width a NaN from plugins.toml", r"algorithm BAD: sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=False\) returned nan, a float, not an int; it must be an int from 1 to the maximum width 8",
         WIDTH + "[algorithms.BAD]\nverify_width = nan\n", {"bad": "width_a_nan_from_plugins_toml"}, ndt=8),
    Case("width a NaN from the plugin", r"sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=True\) returned nan, a float, not an int",
         WIDTH, {"bad": "width_a_nan_from_the_plugin"}, ndt=8),
    Case("max a NaN", r"sgl_spec_max_verify_width\(num_draft_tokens=8\) returned nan, a float, not an int; the maximum width must be an int >= num_draft_tokens=8",
         WIDTH, {"bad": "max_a_nan"}, ndt=8),
    Case("width a numpy array", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=False\) returned array\(\[4, 4\]\), a numpy.ndarray, not an int",
         WIDTH, {"bad": "width_a_numpy_array"}, ndt=8),
    Case("width a numpy int", r"returned np.int64\(4\), a numpy.int64, not an int", WIDTH, {"bad": "width_a_numpy_int"}, ndt=8),
    Case("width an object whose != raises", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=False\) returned <W>, a bad_mod.W, not an int",
         WIDTH, {"bad": "width_an_object_whose_ne_raises"}, ndt=8),
    Case("width an int whose != raises", r"returned 4, a bad_mod.W, not an int",
         WIDTH, {"bad": "width_an_int_whose_ne_raises"}, ndt=8),
    Case("width hook raises a BaseException", r"sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=False\) raised bad_mod.Stop: later \(a BaseException that is not an Exception\)",
         WIDTH, {"bad": "width_hook_raises_a_baseexception"}, ndt=8),
    Case("another process's fingerprint", r"this process \(pid \d+ \(MainProcess, .*\)\) has fingerprint [0-9a-f]{16}, but " + LAUNCHER + r" of the same server has 0123456789abcdef: they load other plugins",
         None, {"bad": "width_2"}, setup=agreement_of({"fingerprint": "0123456789abcdef"})),
    Case("another process's width", r"algorithm BAD \(plugin 'bad'\): sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=False\) is 2 in this process \(pid \d+ .*\) but 4 in " + LAUNCHER + r" of the same server: the plugin's answer depends on the process",
         None, {"bad": "width_2"}, ndt=8,
         setup=agreement_of({"BAD: sgl_spec_verify_width(num_draft_tokens=8, is_draft_worker=False)": 4})),
    Case("widths by batch above max", r"\[algorithms.BAD\] widths_by_batch_size = \{1 = 16, 8 = 8\} in {cfg}: width 16 is above the maximum width 8 at speculative_num_draft_tokens=8",
         WIDTH + "[algorithms.BAD]\nwidths_by_batch_size = {1 = 16, 8 = 8}\n", {"bad": "offers_bad_without_overlap"}, ndt=8),
    Case("widths hook above max", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: sgl_spec_widths_by_batch_size\(num_draft_tokens=8, is_draft_worker=False\) returned \{1 = 16, 8 = 4\}; width 16 is above the maximum width 8",
         WIDTH, {"bad": "widths_hook_above_max"}, ndt=8),
    Case("widths hook not a mapping", r"sgl_spec_widths_by_batch_size\(num_draft_tokens=8, is_draft_worker=False\) returned 8, not widths by batch size: expected a non-empty mapping",
         WIDTH, {"bad": "widths_hook_not_a_mapping"}, ndt=8),
    Case("widths hook changes", r"sgl_spec_widths_by_batch_size\(num_draft_tokens=8, is_draft_worker=False\) answered \{1 = \d+\}, then \{1 = \d+\} for the same arguments; answers must be pure",
         WIDTH + "[algorithms.BAD]\nmax_tokens_per_req = 1024\n", {"bad": "widths_hook_changes"}, ndt=8),
    Case("width hook raises", r"sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=False\) raised ZeroDivisionError", WIDTH,
         {"bad": "width_hook_raises"}, ndt=8),
    Case("width hook exits", r"sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=False\) raised SystemExit \(it called sys.exit\(7\)\)", WIDTH,
         {"bad": "width_hook_exits"}, ndt=8),
    # --- the agreement directory, as a machine holds it (issue 24) ---
    Case("agreement a regular file", r"SGLANG_SPEC_PLUGINS_AGREEMENT=\S+/agreement: a regular file, not a directory; unset SGLANG_SPEC_PLUGINS_AGREEMENT \(the server's first process then makes a fresh directory\) or name a directory",
         None, {"bad": "width_2"}, setup=agreement_file),
    Case("agreement record truncated", AGREED + r"fingerprint.json: not an agreement record \(not JSON: Unterminated string .*\); " + REMOVE_IT,
         None, {"bad": "width_2"}, setup=agreement_holding({"fingerprint": '{"answer": "fingerprint", "value": "0123'})),
    Case("agreement record a directory", AGREED + r"fingerprint.json: not an agreement record \(a directory, not a regular file\); " + REMOVE_IT,
         None, {"bad": "width_2"}, setup=agreement_holding({"fingerprint": None})),
    Case("agreement record of another shape", AGREED + r"fingerprint.json: not an agreement record \(it holds \[1, 2\], not an object with answer, value, process, pid and started\); " + REMOVE_IT,
         None, {"bad": "width_2"}, setup=agreement_holding({"fingerprint": "[1, 2]"})),
    Case("agreement record of an exited process", AGREED + r"fingerprint.json was recorded by pid \d+ \(MainProcess, launch_server.py\), which is no longer running: a record an earlier server left in a reused directory; remove \S+/agreement \(or the files in it\), or unset SGLANG_SPEC_PLUGINS_AGREEMENT",
         None, {"bad": "width_2"}, setup=agreement_holding(
             {"fingerprint": '{"answer": "fingerprint", "value": "0123456789abcdef", "process": "pid {pid} (MainProcess, launch_server.py)", "pid": {pid}, "started": 1}'}, dead=True)),
    Case("agreement width record empty", r"\S+/agreement/answer\.[0-9a-f]{16}\.json: not an agreement record \(empty\); " + REMOVE_IT,
         None, {"bad": "width_2"}, ndt=8,
         setup=agreement_holding({"BAD: sgl_spec_verify_width(num_draft_tokens=8, is_draft_worker=False)": ""})),
    # --- DP attention, as each release resolves it (0.5.23: --attn-dp-size) ---
    Case("widths by batch with --attn-dp-size", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: \[algorithms.BAD\] widths_by_batch_size in {cfg} gives widths by batch size \{1 = 4, 8 = 2\}, " + NOT_WITH_DP,
         WIDTH + "[algorithms.BAD]\nwidths_by_batch_size = {1 = 4, 8 = 2}\n", {"bad": "startable"},
         start=dict(FLAGS, attn_dp_size=2, tp_size=2), since="0.5.23"),
    # --- plugin code that misbehaves: still the plugin's fault, by name (issue 24) ---
    Case("widths answer whose items() raises", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: reading what sgl_spec_widths_by_batch_size\(num_draft_tokens=8, is_draft_worker=False\) returned \(a bad_mod.Widths\) raised RuntimeError: no items",
         WIDTH, {"bad": "widths_answer_whose_items_raises"}, ndt=8),
    Case("widths answer whose iteration raises", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: reading what sgl_spec_widths_by_batch_size\(num_draft_tokens=8, is_draft_worker=False\) returned \(a bad_mod.Widths\) raised RuntimeError: no iter",
         WIDTH, {"bad": "widths_answer_whose_iteration_raises"}, ndt=8),
    Case("width hook raises what cannot be shown", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=False\) raised Weird \(its message cannot be shown: str\(\) of it raised ValueError: bad str\)",
         WIDTH, {"bad": "width_hook_raises_what_cannot_be_shown"}, ndt=8),
    Case("import raises what cannot be shown", r"plugin 'bad' \(bad-drafter==1.0\): cannot import bad_mod: Weird \(its message cannot be shown: str\(\) of it raised ValueError: bad str\)", BAD,
         {"bad": "import_raises_weird"}),
    # --- settings that went silent (issue 24) ---
    Case("typo in a table name beside an unreadable plugin", r"\A{cfg}: \[algorithms.SDB\]: unknown algorithm; no installed plugin offers it \(did you mean SBD, offered by 'sbd'\?\); the source of 'other' \(installed, not loaded\) cannot be read \(no module other_missing_mod\): if 'other' offers SDB, name it with plugin = \"other\"",
         "[plugins]\nenable = ['sbd']\n[algorithms.SDB]\nverify_width = 4\n", {"other": "typo_in_a_table_name_beside_an_unreadable_plugin"}, targets={"other": "other_missing_mod"}),
    Case("verify_width zero beside widths by batch", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: sgl_spec_verify_width\(num_draft_tokens=4, is_draft_worker=False\) returned 0; it must be an int from 1 to the maximum width 8",
         WIDTH + "[algorithms.BAD]\nmax_tokens_per_req = 8\nverify_width = 0\nwidths_by_batch_size = {1 = 4, 8 = 2}\n",
         {"bad": "width_from_settings"}, ndt=4),
    Case("verify_width a string beside widths by batch", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: sgl_spec_verify_width\(num_draft_tokens=4, is_draft_worker=False\) returned 'three', a str, not an int",
         WIDTH + "[algorithms.BAD]\nmax_tokens_per_req = 8\nverify_width = 'three'\nwidths_by_batch_size = {1 = 4, 8 = 2}\n",
         {"bad": "width_from_settings"}, ndt=4),
    Case("validator returns False", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: validate_server_args returned False; SGLang ignores what a validator returns: return None to accept the arguments, or raise ValueError saying what to change",
         WIDTH, {"bad": "validator_returns_false"}, start=FLAGS),
    # --- found only after the weights loaded, now while SGLang resolves its arguments (issue 24) ---
    Case("prompt lookup n-grams reversed beside widths by batch", r"plugin 'prompt_lookup' \(sglang-spec-example-prompt-lookup==0.1.0\): algorithm PROMPT_LOOKUP: sgl_spec_verify_width\(num_draft_tokens=4, is_draft_worker=False\) raised ValueError: \[algorithms.PROMPT_LOOKUP\] min_ngram = 2 is above max_ngram = 1",
         "[plugins]\nenable = ['prompt_lookup']\n[algorithms.PROMPT_LOOKUP]\nmax_tokens_per_req = 4\nmax_ngram = 1\nmin_ngram = 2\nwidths_by_batch_size = {1 = 4, 8 = 2}\n",
         start=dict(FLAGS, speculative_algorithm="PROMPT_LOOKUP", attention_backend="triton"), since="0.5.14"),
    Case("prompt lookup max_ngram zero beside widths by batch", r"plugin 'prompt_lookup' \(sglang-spec-example-prompt-lookup==0.1.0\): algorithm PROMPT_LOOKUP: sgl_spec_verify_width\(num_draft_tokens=4, is_draft_worker=False\) raised ValueError: \[algorithms.PROMPT_LOOKUP\] max_ngram = 0: it must be an int >= 1",
         "[plugins]\nenable = ['prompt_lookup']\n[algorithms.PROMPT_LOOKUP]\nmax_tokens_per_req = 4\nmax_ngram = 0\nwidths_by_batch_size = {1 = 4, 8 = 2}\n",
         ndt=4, algorithm="PROMPT_LOOKUP"),
    Case("worker init_cuda_graphs is None", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: Worker.init_cuda_graphs is None, not a method, but SGLang [0-9.post]+ calls it on every speculative worker \(managers/scheduler.py:\d+\)",
         WIDTH, {"bad": "worker_init_cuda_graphs_is_none"}, start=FLAGS,
         since="0.5.14"),
    Case("worker forward is async", r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: Worker.forward_batch_generation is a coroutine function \(async def\): SGLang [0-9.post]+ calls it and uses what it returns, which would be a coroutine object; make it a plain def",
         WIDTH, {"bad": "worker_forward_is_async"}, start=FLAGS),
    # --- draft checkpoints, refused before SGLang reads them (issue 45) ---
    Case("draft folder missing",
         r"plugin 'dflash_block' \(sglang-spec-example-dflash-block==0.1.0\): algorithm DFLASH_BLOCK: "
         r"--speculative-draft-model-path /nonexistent/sglang-spec-plugins-draft: no such folder \(nor a Hugging Face "
         r"repo id, 'name' or 'namespace/name'\)",
         "[plugins]\nenable = ['dflash_block']\n",
         start=dict(FLAGS, speculative_algorithm="DFLASH_BLOCK",
                    speculative_draft_model_path="/nonexistent/sglang-spec-plugins-draft"), since="0.5.14"),
    Case("draft config not an object",
         r"algorithm DFLASH_BLOCK: --speculative-draft-model-path \S+: \S+/config.json: a JSON list, not an object "
         r"holding the model's settings",
         "[plugins]\nenable = ['dflash_block']\n",
         start=dict(FLAGS, speculative_algorithm="DFLASH_BLOCK", speculative_draft_model_path=str(DRAFTS["list"])),
         since="0.5.14"),
    Case("draft target_layer_ids not a list",
         r"algorithm DFLASH_BLOCK: \S+/config.json dflash_config.target_layer_ids = 0: not a list of the target's layer "
         r"indices \(ints\), the layers whose hidden states the draft reads",
         "[plugins]\nenable = ['dflash_block']\n",
         start=dict(FLAGS, speculative_algorithm="DFLASH_BLOCK", speculative_draft_model_path=str(DRAFTS["layers"])),
         since="0.5.14"),
    # --- the true culprit (issue 45) ---
    Case("hooks brought in by an import",
         r"plugin 'bad' \(bad-drafter==1.0\): algorithm BAD: sgl_spec_verify_width\(num_draft_tokens=8, is_draft_worker=False\) "
         r"returned None for its own algorithm BAD: this sgl_spec_verify_width is prompt_lookup_drafter.plugin.sgl_spec_verify_width "
         r"\(\S+/prompt_lookup_drafter/plugin.py\), which bad_mod imports \(a `from ... import \*` brings in every hook of "
         r"the module it names\), and it answers for that module's algorithms; define sgl_spec_verify_width in bad_mod "
         r"for its own algorithms, or import only the names it uses\Z",
         WIDTH, {"bad": "imports_the_hooks_of_another_plugin"}, ndt=8),
    Case("hooks brought in by an import answer for their module's algorithm",
         r"plugin 'bad' \(bad-drafter==1.0\): sgl_spec_verify_width answered 16 for algorithm PROMPT_LOOKUP, which plugin "
         r"'prompt_lookup' owns; this sgl_spec_verify_width is prompt_lookup_drafter.plugin.sgl_spec_verify_width "
         r"\(\S+/prompt_lookup_drafter/plugin.py\), which bad_mod imports",
         "[plugins]\nenable = ['prompt_lookup', 'bad']\n", {"bad": "imports_the_hooks_of_another_plugin"}),
    # --- settings a worker would ignore or clamp (issue 45): refused, naming the key ---
    Case("acceptance controller on a drafter that picks its widths",
         r"\[algorithms.SBD\] widths_by_acceptance in {cfg}: the worker of SBD picks each step's width itself \(AlgorithmSpec "
         r"picks_widths of plugin 'sbd'\), so the acceptance controller would never choose one; remove widths_by_acceptance",
         "[plugins]\nenable = ['sbd']\n[algorithms.SBD]\nmax_tokens_per_req = 8\nwidths_by_batch_size = {1 = [2, 4, 8]}\n"
         "widths_by_acceptance = true\n", ndt=4, algorithm="SBD"),
    Case("acceptance controller beside a width cycle",
         r"\[algorithms.CONTROLLED_ACCEPTANCE\] widths_by_acceptance in {cfg}: the worker of CONTROLLED_ACCEPTANCE picks each "
         r"step's width itself \(AlgorithmSpec picks_widths of plugin 'controlled_acceptance', with these settings\)",
         "[plugins]\nenable = ['controlled_acceptance']\n[algorithms.CONTROLLED_ACCEPTANCE]\n"
         f"continuations = '{CONTINUATIONS}'\nwidths_by_batch_size = {{1 = [2, 4]}}\nwidth_cycle = [2, 4]\n"
         "widths_by_acceptance = true\n", ndt=4, algorithm="CONTROLLED_ACCEPTANCE"),
    Case("verify width above the draft block",
         r"plugin 'dflash_block' \(sglang-spec-example-dflash-block==0.1.0\): algorithm DFLASH_BLOCK: validate_server_args "
         r"refused --speculative-num-draft-tokens 4: ValueError: \[algorithms.DFLASH_BLOCK\] verify_width = 8: it must be an "
         r"int from 1 to the block the draft model drafts \(4, --speculative-num-draft-tokens\)",
         "[plugins]\nenable = ['dflash_block']\n[algorithms.DFLASH_BLOCK]\nverify_width = 8\n",
         start=dict(FLAGS, speculative_algorithm="DFLASH_BLOCK"), since="0.5.14"),
    Case("block size above ndt",
         r"algorithm DFLASH_BLOCK: validate_server_args refused --speculative-num-draft-tokens 4: ValueError: "
         r"\[algorithms.DFLASH_BLOCK\] block_size = 8: it must be an int from 1 to --speculative-num-draft-tokens \(4\)",
         "[plugins]\nenable = ['dflash_block']\n[algorithms.DFLASH_BLOCK]\nblock_size = 8\n",
         start=dict(FLAGS, speculative_algorithm="DFLASH_BLOCK"), since="0.5.14"),
    Case("widths by batch size on the block drafter",
         r"algorithm DFLASH_BLOCK: \[algorithms.DFLASH_BLOCK\] widths_by_batch_size in {cfg} gives the target worker widths "
         r"by batch size \{1 = 4, 2 = 2\}, but DFlashBlockWorker verifies one width at every step \(its base's rule, "
         r"verifies_one_width\): it would verify 4 at every batch size; give one width",
         "[plugins]\nenable = ['dflash_block']\n[algorithms.DFLASH_BLOCK]\nwidths_by_batch_size = {1 = 4, 2 = 2}\n",
         start=dict(FLAGS, speculative_algorithm="DFLASH_BLOCK"), since="0.5.14"),
]



def resolve_server_args(**fields):
    """SGLang's own ``ServerArgs`` for ``fields`` resolved as ``launch_server`` resolves them: the command line
    through the release's ``prepare_server_args`` (``--model-path`` a two-layer Llama config, on the CPU), then
    its whole resolution (in ``ServerArgs.__post_init__`` up to 0.5.22; ``resolve_once`` on 0.5.23, which
    rewrites ``--enable-dp-attention`` into ``attn_dp_size`` first), where SGLang's speculative handler calls
    the algorithm's validate_server_args."""
    from sglang.srt.server_args import prepare_server_args

    argv = ["--model-path", str(_tiny_model()), "--device", "cpu", "--load-format", "dummy", "--skip-tokenizer-init"]
    for name, value in fields.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value not in (False, None):
            argv += [flag, str(value)]
    args = prepare_server_args(argv)
    if hasattr(args, "resolve_once"):  # 0.5.23: construction leaves the arguments unresolved
        args.resolve_once()
    return args


def _tiny_model() -> Path:
    import tempfile

    from sglang_spec_plugins.testing.scheduler_start import TINY_LLAMA

    model = Path(tempfile.gettempdir()) / f"sglang-spec-plugins-tests-tiny-llama-{os.getpid()}"
    if not (model / "config.json").exists():
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text(json.dumps(TINY_LLAMA))
    return model


def check_flags(case: Case) -> List[str]:
    """The ``check`` flags that say what ``case.start`` or ``case.ndt`` says (``--attention-backend``: the
    backend that runs TARGET_VERIFY, by ``speculative_attention_mode``)."""
    fields = dict(case.start or {})
    ndt = fields.get("speculative_num_draft_tokens", case.ndt)
    mode = fields.get("speculative_attention_mode") or "prefill"
    backend = fields.get(f"{mode}_attention_backend") or fields.get("attention_backend")
    return ([f"-n{ndt}"] if ndt else []) + (["--disable-overlap-schedule"] if fields.get("disable_overlap_schedule") else []) \
        + ([f"--attention-backend={backend}"] if backend else []) \
        + (["--enable-dp-attention"] if fields.get("enable_dp_attention") else []) \
        + ([f"--attn-dp-size={fields['attn_dp_size']}"] if fields.get("attn_dp_size") else []) \
        + ([f"--speculative-draft-model-path={fields['speculative_draft_model_path']}"]
           if fields.get("speculative_draft_model_path") else [])


def prepare(case: Case, root: Path, site) -> Dict[str, str]:
    """Install the case's distributions into ``site``, write its files under
    ``root`` (the working directory) and return the environment it runs with."""
    for name, file in case.dists.items():
        module = f"{name}_mod"
        site.add(f"{name}-drafter", {name: case.targets.get(name, module)}, plugin_modules(module, bad_plugin(file)))
    env = dict(case.env)
    if case.setup is not None:
        env.update(case.setup(root))
    elif case.toml is not None:
        path = root / "plugins.toml"
        path.write_bytes(case.toml if isinstance(case.toml, bytes) else case.toml.encode("utf-8"))
        env["SGLANG_SPEC_PLUGINS_CONFIG"] = str(path)
    return env


def expected(case: Case, root: Path) -> str:
    import re

    return case.expect.replace("{cfg}", re.escape(str(root / "plugins.toml")))


assert len({c.id for c in CASES}) == len(CASES), "case ids must be unique"
assert os.sep == "/", "the messages are written for POSIX paths"
