"""status.json is rewritten in place while its file system is fine (a new file renamed over the
old one cost an idle agent more CPU than the snapshot itself, bench/poll_cost); a change of
size, a file that is gone or replaced, and a full or read-only file system
(tests/agent/test_disk_full.py) go through a new file, as before."""

from __future__ import annotations

import json
import os

from se_forwarder.health.status_file import STATUS_BLOCK, StatusFile


class Snap:
    def __init__(self, **values):
        self.values = values

    def to_json(self):
        return dict(self.values)


def read(path):
    return json.loads(path.read_bytes())


def test_status_json_is_rewritten_in_place_while_its_size_holds(tmp_path):
    sf = StatusFile(tmp_path)
    sf.write(lambda: Snap(n=1))
    first = os.stat(sf.path)
    for n in range(2, 5):
        sf.write(lambda n=n: Snap(n=n))
        assert read(sf.path) == {"n": n}
    now = os.stat(sf.path)
    assert (now.st_ino, now.st_size) == (first.st_ino, STATUS_BLOCK)
    assert oct(now.st_mode & 0o777) == "0o600"
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]  # no temporary file left
    sf.close()


def test_a_change_of_size_goes_through_a_new_file(tmp_path):
    sf = StatusFile(tmp_path)
    sf.write(lambda: Snap(text="x"))
    before = os.stat(sf.path).st_ino
    sf.write(lambda: Snap(text="x" * STATUS_BLOCK))
    assert read(sf.path) == {"text": "x" * STATUS_BLOCK}
    assert os.stat(sf.path).st_size == 2 * STATUS_BLOCK
    assert os.stat(sf.path).st_ino != before
    sf.close()


def test_a_status_json_removed_or_replaced_is_made_again_never_written_through_a_link(tmp_path):
    sf = StatusFile(tmp_path, tmp_path / "run")
    sf.write(lambda: Snap(n=1))
    sf.path.unlink()
    sf.write(lambda: Snap(n=2))
    assert read(sf.path) == {"n": 2}
    victim = tmp_path / "victim"
    victim.write_text("keep")
    sf.path.unlink()
    sf.path.symlink_to(victim)
    sf.write(lambda: Snap(n=3))
    assert victim.read_text() == "keep"
    assert not sf.path.is_symlink() and read(sf.path) == {"n": 3}
    assert read(tmp_path / "run" / "status.json") == {"n": 3}  # the runtime copy too
    sf.close()
