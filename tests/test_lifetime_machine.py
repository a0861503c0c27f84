"""The lifetime of jask's stores as a state machine (hypothesis.stateful).

Random interleavings of what a user does with real stores in a scratch
folder: make arrays, take views, record pending results (eager ops are lazy),
observe them (compute), claim the outputs of a compiled call, drop the last
reference and collect the garbage, sweep, fork a child that drops everything,
change a store that views and pending results read, and run programs in
threads at once (each with its own safe points). What must hold, checked on
jask.store.registry's records and on the folder on disk:

* no store is lost: after every step, the record of every array the test
  holds is owned, a view's base is not trash, and every store something can
  still reach is on disk; observing an array (and, at the end, every array)
  gives the values it was given;
* none is leaked: after a collection (and at the end, with everything
  dropped), the stores alive are exactly those something reachable reads
  (the test's arrays, their views' bases, the stores their pending results
  read), and the session folder holds those and nothing else.

By default 25 runs of up to 25 steps (20-30 s); the slow variant
(``JASK_LIFETIME_LONG=1``) runs 150 of up to 40.
"""
import gc
import os
import signal
import threading
import time
import warnings

import hypothesis.strategies as st
import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

import jask
from jask.engine import lazy
from jask.store import registry, trash
from jask.store.kinds.local import sessions
from jask.store.spec import StoreSpec

SHAPE = (6, 4)
#: Compiled once per process: claims two new stores, drops one made inside.
_program = jax.jit(lambda a, b: (a * 3.0 + b, jask.transpose(a - b) * 2.0))


def _values(rng_seed: int) -> np.ndarray:
    """Small integers: every op below is exact in float32."""
    return np.random.default_rng(rng_seed).integers(-8, 8, SHAPE).astype(np.float32)


class Lifetimes(RuleBasedStateMachine):
    """The test's arrays are a dict name -> (DiskArray, the values it must read)."""

    arrays = Bundle("arrays")

    def __init__(self):
        super().__init__()
        self.model: dict = {}
        self.names = iter(range(10**9))
        self.scratch = jask.get_config().scratch_dir
        self.folder = sessions.session_dir(self.scratch)
        self.before = set(os.listdir(self.folder))
        self.forks = 0  # (each costs a process: a few per run)

    def _add(self, x, expected) -> str:
        name = f"a{next(self.names)}"
        self.model[name] = (x, np.asarray(expected, np.float32))
        return name

    # --- what a user does ------------------------------------------------------
    @initialize(target=arrays, seeds=st.lists(st.integers(0, 2**16), min_size=2, max_size=4))
    def start(self, seeds):
        """A few arrays to begin with, a view and a pending result among them."""
        names = [self.make(seed) for seed in seeds]
        return multiple(*names, self.view(names[0], "T"), self.record(names[1], names[0], 2.0))

    @rule(target=arrays, seed=st.integers(0, 2**16))
    def make(self, seed):
        values = _values(seed)
        return self._add(jask.from_numpy(values), values)

    @rule(target=arrays, name=arrays, kind=st.sampled_from(["T", "rows", "cols"]))
    def view(self, name, kind):
        if name not in self.model:
            return self._add(jask.from_numpy(_values(0)), _values(0))
        x, v = self.model[name]
        if kind == "T":
            return self._add(x.T, v.T)
        if kind == "rows":
            return self._add(x[1:3], v[1:3])
        return self._add(x[:, 1:], v[:, 1:])

    @rule(target=arrays, name=arrays, other=arrays, c=st.sampled_from([0.5, 2.0, -1.0]))
    def record(self, name, other, c):
        """A pending result: recorded, computed when first needed."""
        if name not in self.model:
            return self._add(jask.from_numpy(_values(1)), _values(1))
        x, v = self.model[name]
        y, w = self.model.get(other, (None, None))
        if y is not None and y.shape == x.shape:
            return self._add(x * c + y, v * np.float32(c) + w)
        return self._add(jask.square(x) * c, np.square(v) * np.float32(c))

    @rule(name=arrays)
    def observe(self, name):
        if name in self.model:
            x, v = self.model[name]
            np.testing.assert_array_equal(x.to_numpy(), v)

    @rule(target=arrays, name=arrays, other=arrays, seed=st.integers(0, 2**16))
    def claim(self, name, other, seed):
        """A compiled call: its two outputs are claimed, what it made inside is not."""
        x, v = self.model.get(name, (None, None))
        y, w = self.model.get(other, (None, None))
        if x is None or x.shape != SHAPE:
            x, v = jask.from_numpy(_values(seed)), _values(seed)
        if y is None or y.shape != SHAPE:
            y, w = x, v
        p, q = _program(x, y)
        self._add(q, (v - w).T * 2.0)
        return self._add(p, v * 3.0 + w)

    @rule(name=consumes(arrays))
    def collect(self, name):
        """Drop the last reference the test holds; its garbage goes at a safe point."""
        self.model.pop(name, None)
        gc.collect()

    @rule()
    def sweep(self):
        jask.collect()
        self._check_no_leak()

    @rule(name=arrays, other=arrays, seed=st.integers(0, 2**16))
    def update(self, name, other, seed):
        """Change a store (from another array of its shape, or a new one):
        its views and the pending results reading it keep the values they
        had (computed or copied first)."""
        x, _ = self.model.get(name, (None, None))
        if x is None:
            return
        y, w = self.model.get(other, (None, None))
        if y is None or y.shape != x.shape or other == name:
            w = np.random.default_rng(seed).integers(-8, 8, x.shape).astype(np.float32)
            y = jask.from_numpy(w)
        x.update_(y)
        self.model[name] = (x, w)

    @precondition(lambda self: hasattr(os, "fork") and self.forks < 2)
    @rule()
    def fork(self):
        """A forked child that drops everything and sweeps leaves this
        process's stores alone (no JAX call there: XLA may hang in a child)."""
        self.forks += 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # JAX warns that it is multithreaded
            pid = os.fork()
        if pid == 0:
            code = 3
            try:
                self.model.clear()
                gc.collect()
                registry.sweep()
                trash.wait()
                code = 0
            finally:
                os._exit(code)
        deadline = time.monotonic() + 60
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise AssertionError("the forked child did not finish its sweep")
            time.sleep(0.01)
        assert os.waitstatus_to_exitcode(status) == 0, "the forked child's sweep failed"
        self._check_not_lost()

    @rule(seeds=st.lists(st.integers(0, 2**16), min_size=2, max_size=3),
          steps=st.lists(st.sampled_from(["make", "record", "view", "jit", "observe",
                                          "drop", "collect"]), min_size=3, max_size=8))
    def threads(self, seeds, steps):
        """Programs in threads at once, each with its own arrays, reading the
        test's too; each keeps its last array, handed back to the test."""
        shared = [x for x, _ in list(self.model.values())[:3]]
        expected = [v for _, v in list(self.model.values())[:3]]
        results: dict = {}

        def program(i, seed):
            try:
                mine = [(jask.from_numpy(_values(seed)), _values(seed))]
                for step in steps:
                    x, v = mine[-1]
                    if step == "make":
                        mine.append((jask.from_numpy(_values(seed + 1)), _values(seed + 1)))
                    elif step == "record":
                        mine.append((x * 2.0 + 1.0, v * 2.0 + 1.0))
                    elif step == "view":
                        mine.append((x.T, v.T))
                    elif step == "jit" and x.shape == SHAPE:
                        p, q = _program(x, x)
                        mine += [(p, v * 4.0), (q, np.zeros(SHAPE[::-1], np.float32))]
                    elif step == "observe":
                        np.testing.assert_array_equal(x.to_numpy(), v)
                        for s, e in zip(shared, expected):
                            np.testing.assert_array_equal(s.to_numpy(), e)
                    elif step == "drop" and len(mine) > 1:
                        del mine[0]
                    elif step == "collect":
                        jask.collect()
                results[i] = mine[-1]
            except BaseException as err:  # noqa: BLE001 - reported by the test's thread
                results[i] = err

        running = [threading.Thread(target=program, args=(i, s)) for i, s in enumerate(seeds)]
        [t.start() for t in running]
        [t.join() for t in running]
        for i in range(len(seeds)):
            if isinstance(results[i], BaseException):
                raise results[i]
            self._add(*results[i])

    # --- what must hold --------------------------------------------------------
    @invariant()
    def nothing_read_is_lost(self):
        self._check_not_lost()

    def _check_not_lost(self):
        for x, _ in self.model.values():
            record = registry._records[x._handle]
            assert record.state is registry.State.OWNED, (x._handle, record.state)
            assert record.base is None or record.base.state is not registry.State.TRASH
        for path in self._reachable():
            assert os.path.isdir(path), f"a store something reads was deleted: {path}"

    def _check_no_leak(self):
        """Right after a collection: the stores alive are the reachable ones, on disk too."""
        reachable = self._reachable()
        live = {p for p in registry.live_paths() if p.startswith(self.folder + os.sep)}
        assert live == reachable, (sorted(live - reachable), sorted(reachable - live))
        on_disk = {os.path.join(self.folder, n) for n in os.listdir(self.folder)} - {
            os.path.join(self.folder, n) for n in self.before}
        assert on_disk == live, (sorted(on_disk - live), sorted(live - on_disk))

    def _reachable(self) -> set:
        """Paths of the managed stores the test's arrays read, directly or
        through a view's base or a pending result's inputs."""
        found: set = set()

        def store(s: StoreSpec):
            if s.view is not None:
                store(s.view.base)
            elif s.managed and s.path.startswith(self.folder + os.sep):
                found.add(s.path)

        def walk(x):
            if isinstance(x, StoreSpec):
                store(x)
            elif isinstance(x, lazy.Recorded):
                if x.store is not None:
                    store(x.store)
                for y in x.inputs:
                    walk(y)

        for x, _ in self.model.values():
            waiting = registry.deferred(x._handle)
            if waiting is not None:
                walk(waiting)
            else:
                store(registry.spec(x._handle))
        return found

    def teardown(self):
        for name in list(self.model):
            self.observe(name)
        self.model.clear()
        jask.collect()
        self._check_no_leak()
        assert not self._reachable()


def _run(examples: int, steps: int) -> None:
    gc.freeze()  # what came before: each collection scans only what the machine made
    run_state_machine_as_test(Lifetimes, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


def test_lifetimes_as_a_state_machine(small_budget):
    _run(examples=25, steps=25)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("JASK_LIFETIME_LONG"),
                    reason="minutes: opt-in with JASK_LIFETIME_LONG=1")
def test_lifetimes_as_a_state_machine_longer(small_budget):
    _run(examples=150, steps=40)
