"""set_memory_budget: units, the RAM clamp, the scratch folder and tmpfs."""
import os

import numpy as np
import psutil
import pytest

import jask
from jask.base import config


@pytest.mark.parametrize("text,nbytes", [("512MB", 512 * 10**6), ("4GB", 4 * 10**9),
                                         ("1GiB", 2**30), ("64KB", 64_000), (12345, 12345)])
def test_units(text, nbytes):
    assert config.parse_budget(text) == nbytes


@pytest.mark.parametrize("bad", ["lots", "12XB", "", -5, 0, 1.5, None, True])
def test_bad_budget_is_a_value_error_quoting_it(bad):
    with pytest.raises(ValueError, match=repr(bad).replace("(", r"\(").replace(".", r"\.")):
        jask.set_memory_budget(bad)


def test_effective_budget_is_clamped_to_available_ram(tmp_path):
    jask.set_memory_budget("1000TB", scratch_dir=str(tmp_path / "s"))
    cfg = jask.get_config()
    assert cfg.requested_memory == 10**15
    assert cfg.max_memory <= 0.8 * psutil.virtual_memory().available * 1.05
    jask.set_memory_budget("64MB", scratch_dir=str(tmp_path / "s"))
    assert jask.get_config().max_memory == 64 * 10**6


def test_scratch_created_on_demand_and_defaults_to_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    jask.set_memory_budget("64MB")
    cfg = jask.get_config()
    assert cfg.scratch_dir == str(tmp_path / ".jask_scratch")
    assert not os.path.exists(cfg.scratch_dir)
    a = jask.from_numpy(np.ones(3))
    assert a.filename.startswith(cfg.scratch_dir)


@pytest.mark.skipif(config.filesystem_type("/dev/shm") is None, reason="no tmpfs at /dev/shm")
def test_ram_backed_scratch_is_refused(tmp_path):
    with pytest.raises(RuntimeError, match="/dev/shm/jask.*RAM-backed.*tmpfs"):
        jask.set_memory_budget("64MB", scratch_dir="/dev/shm/jask")
    jask.set_memory_budget("64MB", scratch_dir="/dev/shm/jask-test", allow_tmpfs=True)
    assert jask.get_config().allow_tmpfs


def test_disk_is_not_ram_backed(tmp_path):
    assert config.filesystem_type(str(tmp_path / "not" / "yet")) is None


def test_default_config_without_set_memory_budget(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(config, "_active", None)
    cfg = jask.get_config()
    assert cfg.requested_memory == config.parse_budget(config.DEFAULT_MAX_MEMORY)
    assert float(jask.sum(jask.from_numpy(np.ones(4)))) == 4.0


def test_explicit_config_per_op(tmp_path, small_budget):
    other = config.make_config("1MB", scratch_dir=str(tmp_path / "other"))
    a = jask.from_numpy(np.ones((50, 50), np.float32), config=other)
    b = jask.add(a, a, config=other)
    assert b.filename.startswith(str(tmp_path / "other"))
    assert b.chunks == (50, 50)  # 1MB allows one tile; the 64KB default would not
    np.testing.assert_array_equal(b.to_numpy(), 2 * np.ones((50, 50)))
