"""engine/source_cache.py: answers kept between processes, keyed by the content of the files read."""

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from sglang_spec_plugins.engine import source_cache
from sglang_spec_plugins.engine.source_cache import CACHE_ENV, cache_dir, cached, python_files

READER = (source_cache,)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "srt"
    (root / "managers").mkdir(parents=True)
    (root / "a.py").write_text("A = 1\n")
    (root / "managers" / "b.py").write_text("B = 2\n")
    (root / "notes.txt").write_text("not read\n")
    return root


class Counting:
    """A compute function that counts its calls and returns the files' text."""

    def __init__(self, root):
        self.root, self.calls = root, 0

    def __call__(self, files=None):
        self.calls += 1
        return {rel: Path(path).read_text() for rel, path, _, _ in (python_files(self.root) if files is None else files)}


def ask(root, compute, environ, reader=READER):
    return cached("test", root, reader, compute, lambda value: value, dict, environ=environ)


def entries(where):
    return sorted(p.name for p in where.iterdir())


def test_python_files_lists_every_py_file_sorted(tree):
    (tree / "managers" / "__pycache__").mkdir()
    (tree / "managers" / "__pycache__" / "stray.py").write_text("")  # a bytecode folder is not entered
    assert [rel for rel, *_ in python_files(tree)] == ["a.py", "managers/b.py"]


def test_a_second_process_takes_the_entry_without_computing(tree, tmp_path):
    env = {CACHE_ENV: str(tmp_path / "cache")}
    first = Counting(tree)
    assert ask(tree, first, env) == {"a.py": "A = 1\n", "managers/b.py": "B = 2\n"}
    again = Counting(tree)
    assert ask(tree, again, env) == {"a.py": "A = 1\n", "managers/b.py": "B = 2\n"}
    assert (first.calls, again.calls) == (1, 0)
    assert len(entries(tmp_path / "cache")) == 1


def test_same_content_with_new_times_is_a_hit_and_refreshes_the_times(tree, tmp_path):
    """The first entry skips the content digest; the first change of times
    computes it (and the value); from then on a reinstall of the same files
    (new times, same bytes) is a hit."""
    env = {CACHE_ENV: str(tmp_path / "cache")}
    ask(tree, Counting(tree), env)
    (entry,) = (tmp_path / "cache").iterdir()
    assert json.loads(entry.read_text())["content"] is None
    os.utime(tree / "a.py", ns=(1, 1))  # as a reinstall of the same files does
    once = Counting(tree)
    ask(tree, once, env)
    recorded = json.loads(entry.read_text())
    assert once.calls == 1 and recorded["content"]
    os.utime(tree / "a.py", ns=(2, 2))
    again = Counting(tree)
    assert ask(tree, again, env) == Counting(tree)()
    assert again.calls == 0
    assert json.loads(entry.read_text())["times"] != recorded["times"]


@pytest.mark.parametrize("change", ["edit", "same size", "add", "remove"])
def test_other_content_is_computed_again(tree, tmp_path, change):
    env = {CACHE_ENV: str(tmp_path / "cache")}
    ask(tree, Counting(tree), env)
    os.utime(tree / "managers" / "b.py", ns=(3, 3))
    ask(tree, Counting(tree), env)  # the entry holds the content digest now
    stat = (tree / "a.py").stat()
    if change == "edit":
        (tree / "a.py").write_text("A = 10\n")
    elif change == "same size":  # same size and modification time: only the content digest tells
        (tree / "a.py").write_text("A = 9\n")
        os.utime(tree / "a.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
        (tree / "managers" / "b.py").touch()  # some time differs, so the content is read
    elif change == "add":
        (tree / "managers" / "c.py").write_text("C = 3\n")
    else:
        (tree / "managers" / "b.py").unlink()
    again = Counting(tree)
    assert ask(tree, again, env) == Counting(tree)()
    assert again.calls == 1


def test_another_reader_is_another_key(tree, tmp_path):
    env = {CACHE_ENV: str(tmp_path / "cache")}
    ask(tree, Counting(tree), env)
    other = types.ModuleType("other_reader")
    other.__file__ = str(tmp_path / "other_reader.py")
    Path(other.__file__).write_text("# another reading code\n")
    again = Counting(tree)
    ask(tree, again, env, reader=(source_cache, other))
    assert again.calls == 1


@pytest.mark.parametrize("corrupt", [b"", b'{"key": "', b"\xff\xfe not json", b"[1, 2]", b'{"key": "x"}', "decode"])
def test_a_corrupt_entry_is_computed_again_and_replaced(tree, tmp_path, corrupt):
    env = {CACHE_ENV: str(tmp_path / "cache")}
    ask(tree, Counting(tree), env)
    (entry,) = (tmp_path / "cache").iterdir()
    if corrupt == "decode":  # whole JSON with the right key, a value decode() cannot take
        data = json.loads(entry.read_text())
        entry.write_text(json.dumps({**data, "value": [1, 2, 3]}))
    else:
        entry.write_bytes(corrupt)
    again = Counting(tree)
    assert ask(tree, again, env) == Counting(tree)()
    assert again.calls == 1
    assert json.loads(entry.read_text())["value"] == Counting(tree)()  # whole again


@pytest.mark.parametrize("where", ["under a file", "a directory nobody writes"])
def test_an_unwritable_directory_computes_and_does_not_raise(tree, tmp_path, where):
    if where == "under a file":
        (tmp_path / "plain").write_text("a file, not a directory")
        cache = tmp_path / "plain" / "cache"
    else:
        cache = Path("/proc/self")  # exists; not even root can create a file there
    env = {CACHE_ENV: str(cache)}
    runs = [Counting(tree) for _ in range(2)]
    assert [ask(tree, run, env) for run in runs] == [Counting(tree)()] * 2
    assert [run.calls for run in runs] == [1, 1]


def test_off_computes_every_time_and_writes_nothing(tree, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    env = {CACHE_ENV: "off", "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    runs = [Counting(tree) for _ in range(2)]
    for run in runs:
        ask(tree, run, env)
    assert [run.calls for run in runs] == [1, 1]
    assert not (tmp_path / "xdg").exists()


def test_where_entries_live(tmp_path):
    assert cache_dir({CACHE_ENV: str(tmp_path)}) == tmp_path
    assert cache_dir({CACHE_ENV: "OFF"}) is None
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "sglang-spec-plugins"
    assert cache_dir({}) == Path(os.path.expanduser("~"), ".cache", "sglang-spec-plugins")


WRITER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from sglang_spec_plugins.engine import source_cache
    root, cache, start = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    time.sleep(max(0.0, start - time.time()))  # every writer starts at once
    def compute(files):
        return {rel: Path(path).read_text() * 2000 for rel, path, _, _ in files}
    value = source_cache.cached("test", root, (source_cache,), compute, lambda v: v, dict, environ={"SGLANG_SPEC_PLUGINS_CACHE": cache})
    print(json.dumps(value == compute(source_cache.python_files(root))))
""")


def test_many_processes_starting_at_once_leave_one_whole_entry(tree, tmp_path):
    """As the processes of one server do: each computes on an empty cache and
    writes; every one gets the right value, and one whole entry is left."""
    import time

    cache = tmp_path / "cache"
    start = str(time.time() + 3)
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(tree), str(cache), start], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(8)]
    results = [w.communicate(timeout=120) for w in writers]
    assert [(w.returncode, out.strip()) for w, (out, _) in zip(writers, results)] == [(0, "true")] * 8, results
    (entry,) = cache.iterdir()  # no scratch file left behind
    assert json.loads(entry.read_text())["value"]["a.py"] == "A = 1\n" * 2000


TORN = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from sglang_spec_plugins.cache_entries import write_entry
    role, path, until = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
    if role == "writer":
        for round in range(30):
            write_entry(path, {"round": round, "pid": os.getpid(), "value": "x" * 1_000_000})
    else:
        reads = 0
        while time.time() < until:
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            assert len(json.loads(data)["value"]) == 1_000_000, "a torn entry"
            reads += 1
        print(reads)
""")


def test_readers_never_see_a_torn_entry(tmp_path):
    """Writers replace a 1 MB entry over and over while readers read it: every
    read is a whole entry (a write in place would show half-written files)."""
    import time

    path = tmp_path / "cache" / "entry.json"
    until = str(time.time() + 6)
    run = lambda role: subprocess.Popen([sys.executable, "-c", TORN, role, str(path), until],  # noqa: E731
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = [run("reader"), run("reader")] + [run("writer") for _ in range(3)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 5, results
    assert all(int(out) > 0 for out, _ in results[:2]), results  # the readers did read entries
    assert [p.name for p in path.parent.iterdir()] == ["entry.json"]


def test_cached_reading_follows_the_files_the_computation_read(tree, tmp_path):
    """cached_reading keys on the files read through source_text (and looked for with note), not a folder."""
    from sglang_spec_plugins.engine import source_text
    from sglang_spec_plugins.engine.source_cache import cached_reading

    absent = tree / "managers" / "later.py"
    calls = []

    def compute():
        calls.append(1)
        source_text.note(absent)
        return source_text.method_in_file(tree / "a.py", "A.f") or "none:" + source_text._text(tree / "a.py")

    def ask_reading():
        source_text._read.cache_clear()
        return cached_reading("test-reading", ["release"], READER, compute, lambda v: v, str,
                              environ={CACHE_ENV: str(tmp_path / "cache")})

    first = ask_reading()
    assert (ask_reading(), len(calls)) == (first, 1)
    (tree / "managers" / "b.py").write_text("B = 3\n")  # not read: still a hit
    assert (ask_reading(), len(calls)) == (first, 1)
    os.utime(tree / "a.py", ns=(5, 5))  # read, same content: a hit
    assert (ask_reading(), len(calls)) == (first, 1)
    (tree / "a.py").write_text("A = 2\n")
    assert ask_reading() == "none:\nA = 2\n" and len(calls) == 2
    absent.write_text("# now there\n")  # looked for, absent then
    ask_reading()
    assert len(calls) == 3
