"""dist_metadata.fields reads a distribution's fields off its metadata's header block: what the email
parser (``Distribution.metadata``) gives, on every installed distribution and where a header is unusual."""

from importlib import metadata

import pytest

from sglang_spec_plugins import dist_metadata

NAMES = ("Name", "Version", "Summary", "License", "Requires-Python", "Absent-Field")


def test_every_installed_distribution_reads_as_the_parser_reads_it():
    dists = list(metadata.distributions())
    assert len(dists) > 10
    for dist in dists:
        assert dist_metadata.fields(dist, *NAMES) == tuple(dist.metadata[n] for n in NAMES), dist


@pytest.mark.parametrize("header", [
    "Metadata-Version: 2.1\nName: a-b\nVersion: 1.0 \n",  # a trailing blank is kept, as the parser keeps it
    "Metadata-Version: 2.1\nname:  a-b\nVERSION:\t1.0\nVersion: 2.0\n",  # any case; the first value
    "Metadata-Version: 2.1\nName: a-b\nVersion:\n  1.0\n",  # a folded wanted field: the parser's reading
    "Metadata-Version: 2.1\nDescription: one\n        two\nName: a-b\nVersion: 1.0\n",  # another field folded
    "Metadata-Version: 2.1\nName: a-b\nVersion: 1.0\n\nName: in the body\n",
    "Metadata-Version: 2.1\nnot a field\nName: a-b\nVersion: 1.0\n",
    "Name: a-b\nVersion: 1.0",
    "Metadata-Version: 2.1\nName: a-b\nVersion: 1.0\nnot a field\nRequires-Dist: x\n",  # after every wanted field
    "Metadata-Version: 2.1\nName: a-b\nVersion: 1.0\n  folded\nRequires-Dist: x\n",  # the last wanted one folded
])
def test_an_unusual_header_reads_as_the_parser_reads_it(tmp_path, header):
    folder = tmp_path / "a_b-1.0.dist-info"
    folder.mkdir()
    (folder / "METADATA").write_text(header)
    dist = metadata.PathDistribution(folder)
    assert dist_metadata.fields(dist, "Name", "Version", "Absent") == (dist.metadata["Name"], dist.metadata["Version"], None)


def test_pkg_info_is_read_where_there_is_no_metadata_file(tmp_path):
    folder = tmp_path / "a_b.egg-info"
    folder.mkdir()
    (folder / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: a-b\nVersion: 0.3\n")
    assert dist_metadata.fields(metadata.PathDistribution(folder), "Name", "Version") == ("a-b", "0.3")
