"""@tl.autotune on the CPU tier: choosing with a fake timer, the disk cache (hit, miss, a
corrupt entry, a second process, concurrent processes), the safety of the caller's data
while trials run, configs that fail, the progress line; and tl.testing.bench / sweep."""

import json
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tilelang as tl
from tilelang.autotune import dot_configs


def _accumulate(x, out, TILE: tl.Constant):
    """out += 2 x: a read-modify-write, so a trial that was not undone would show."""
    i = tl.block_id(0)
    tl.store(out, tl.load(out, index=(i,), shape=(TILE,)) + 2 * tl.load(x, index=(i,), shape=(TILE,)), index=(i,))


CONFIGS = [tl.Config(TILE=64, num_threads=32), tl.Config(TILE=128, num_threads=64), tl.Config(TILE=256, num_threads=64)]
FAKE_MS = {64: 3.0, 128: 1.0, 256: 2.0}


def _fake_timer(calls):
    def timer(run, config):
        run()
        calls.append(config.constants["TILE"])
        return FAKE_MS[config.constants["TILE"]]

    return timer


def _tuned(calls=None, configs=CONFIGS, **options):
    kernel = tl.tile_kernel(_accumulate, backend="cpu")
    options.setdefault("timer", _fake_timer([] if calls is None else calls))
    return tl.autotune(configs=configs, key=["x"], **options)(kernel)


def _grid(n):
    return lambda args: (tl.cdiv(n, args["TILE"]),)


def _launch(kernel, n=1000, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, n).astype(np.float32)
    out = rng.integers(-50, 50, n).astype(np.float32)
    expected = out + 2 * x
    kernel[_grid(n)](x, out)
    return out, expected


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_the_fastest_config_is_chosen_and_the_data_is_left_alone(cache):
    calls = []
    kernel = _tuned(calls)
    out, expected = _launch(kernel)
    np.testing.assert_array_equal(out, expected)  # the trials' writes were undone: one real launch
    assert calls == [64, 128, 256]
    assert kernel.choices[kernel.key_of({"x": np.zeros(1000, np.float32)}, "cpu")].constants == {"TILE": 128}
    out, expected = _launch(kernel, seed=1)  # the same key: no trial runs
    np.testing.assert_array_equal(out, expected)
    assert calls == [64, 128, 256] and len(kernel.tunings) == 1
    _launch(kernel, n=3000)  # a new shape is a new key
    assert len(kernel.tunings) == 2


@pytest.mark.parametrize("again_ms", [1.0, 0.0])  # (a time of 0.0 is a time)
def test_configs_timed_close_to_the_fastest_are_timed_again_in_reverse_order(cache, again_ms):
    """A config timed slow once (the GPU's clocks low after a compile) is within 10% of the
    fastest: timed again, its faster time wins; one far behind is not timed again."""
    calls, first_ms = [], {64: 3.0, 128: 2.1, 256: 2.0}

    def timer(run, config):
        run()
        tile = config.constants["TILE"]
        calls.append(tile)
        return first_ms[tile] if calls.count(tile) == 1 else {**FAKE_MS, 128: again_ms}[tile]

    kernel = _tuned(timer=timer)
    out, expected = _launch(kernel)
    np.testing.assert_array_equal(out, expected)  # the second round's writes undone too
    assert calls == [64, 128, 256, 256, 128]
    (tuning,) = kernel.tunings
    assert tuning["chosen"] == "TILE=128 threads=64 stages=3"
    assert tuning["times_ms"] == {"TILE=64 threads=32 stages=3": 3.0, "TILE=128 threads=64 stages=3": again_ms,
                                  "TILE=256 threads=64 stages=3": 2.0}  # fmt: skip


def test_the_choice_is_cached_on_disk(cache):
    calls = []
    _launch(_tuned(calls))
    (entry,) = (cache / "autotune").iterdir()
    assert json.loads(entry.read_text())["chosen"] == "TILE=128 threads=64 stages=3"
    again = _tuned(calls)  # as a new process would: nothing in memory
    out, expected = _launch(again)
    np.testing.assert_array_equal(out, expected)
    assert len(calls) == 3 and again.tunings == []
    _launch(_tuned(calls, cache=False))  # memory only: tuned again
    assert len(calls) == 6


def _grouped_sum(groups):
    def helper(t, T):
        return tl.sum(t.reshape((T // groups, groups)), axis=1)

    def kernel(x, out, T: tl.Constant):
        tl.store(out, helper(tl.load(x, index=(0,), shape=(T,)), T), index=(0,))

    configs = [tl.Config(T=8), tl.Config(T=6)]  # (T=8 does not take groups of 3)
    return tl.autotune(configs=configs, key=["x"], timer=lambda run, config: run() or 1.0)(
        tl.tile_kernel(kernel, backend="cpu")
    )


def test_the_cache_entry_is_keyed_on_what_the_kernel_reads(cache):
    """Same source, other closure values (or a helper module's constant, in another process):
    the entry of the first was used for the second, whose stored choice (T=8) does not compile."""
    x = np.arange(24, dtype=np.float32)
    for groups, want in [(4, [6.0, 22.0]), (3, [3.0, 12.0])]:
        out = np.zeros(8, np.float32)
        _grouped_sum(groups)[1](x, out)
        np.testing.assert_array_equal(out[:2], want)
    assert len(list((cache / "autotune").iterdir())) == 2


def test_a_corrupt_cache_entry_is_tuned_again(cache, caplog):
    _launch(_tuned())
    (entry,) = (cache / "autotune").iterdir()
    for garbage in ["{not json", json.dumps({"index": 7, "chosen": "x"}), json.dumps({"index": 0, "chosen": "x"})]:
        entry.write_text(garbage)
        kernel = _tuned()
        with caplog.at_level(logging.WARNING, "tilelang.autotune"):
            _launch(kernel)
        assert "corrupt" in caplog.text and len(kernel.tunings) == 1
        assert json.loads(entry.read_text())["chosen"] == "TILE=128 threads=64 stages=3"  # rewritten


SCRIPT = textwrap.dedent(
    """
    import sys, numpy as np, tilelang as tl

    @tl.autotune(configs=[tl.Config(TILE=64), tl.Config(TILE=128)], key=["x"],
                 timer=lambda run, config: (run(), {64: 2.0, 128: 1.0}[config.constants["TILE"]])[1])
    @tl.tile_kernel(backend="cpu")
    def double(x, out, TILE: tl.Constant):
        i = tl.block_id(0)
        tl.store(out, 2 * tl.load(x, index=(i,), shape=(TILE,)), index=(i,))

    x = np.arange(500, dtype=np.float32)
    out = np.zeros_like(x)
    double[lambda args: (tl.cdiv(500, args["TILE"]),)](x, out)
    assert np.array_equal(out, 2 * x)
    print("tuned" if double.tunings else "cached", list(double.choices.values())[0].constants["TILE"])
    """
)


def _processes(path, cache, count):
    env = dict(os.environ, TILELANG_CACHE_DIR=str(cache))
    started = [subprocess.Popen([sys.executable, str(path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(count)]  # fmt: skip
    done = [p.communicate(timeout=300) + (p.returncode,) for p in started]
    for _, err, code in done:
        assert code == 0, err
    return done


def test_a_second_process_launches_with_the_cached_choice(cache, tmp_path):
    path = tmp_path / "double.py"
    path.write_text(SCRIPT)
    ((first, err, _),) = _processes(path, cache, 1)
    assert first.split() == ["tuned", "128"] and "chose TILE=128" in err
    ((second, err, _),) = _processes(path, cache, 1)
    assert second.split() == ["cached", "128"] and "chose" not in err


def test_concurrent_processes_tune_and_leave_one_valid_entry(cache, tmp_path):
    path = tmp_path / "double.py"
    path.write_text(SCRIPT)
    done = _processes(path, cache, 3)
    assert {out.split()[1] for out, _, _ in done} == {"128"}
    (entry,) = (cache / "autotune").glob("*.json")
    assert json.loads(entry.read_text())["chosen"] == "TILE=128 threads=auto stages=3"
    assert not list((cache / "autotune").glob("*.tmp"))


def test_configs_that_fail_are_skipped_with_their_reason(cache):
    too_big = tl.Config(TILE=4096, num_threads=32)  # 128 elements a thread: over the limit
    kernel = _tuned(configs=[too_big, *CONFIGS])
    out, expected = _launch(kernel)
    np.testing.assert_array_equal(out, expected)
    times = kernel.tunings[0]["times_ms"]
    assert "TileLimitError" in times["TILE=4096 threads=32 stages=3"] and times["TILE=128 threads=64 stages=3"] == 1.0


def test_all_configs_failing_is_an_error_that_lists_them(cache):
    kernel = _tuned(configs=[tl.Config(TILE=4096, num_threads=32), tl.Config(TILE=8192, num_threads=64)])
    x = np.ones(100, np.float32)
    out = x.copy()
    with pytest.raises(tl.TileCompilerError, match="no config ran") as err:
        kernel[_grid(100)](x, out)
    assert "TILE=4096 threads=32" in str(err.value) and "TILE=8192 threads=64" in str(err.value)
    np.testing.assert_array_equal(out, x)


def _broken(x, out, TILE: tl.Constant):
    tl.store(out, tl.load(x, index=(0,), shape=(TILE,)) + tl.zeros((3,)), index=(0,))  # the kernel's own bug


def test_a_bug_of_the_kernel_in_every_config_is_its_own_error_at_its_line(cache):
    """It was a TileCompilerError (tilelang's bugs) with no location, the real error only in its text;
    a Constant the configs set, given at the launch, had no location either."""
    kernel = tl.autotune(configs=CONFIGS[:2], key=["x"], timer=_fake_timer([]))(tl.tile_kernel(_broken, backend="cpu"))
    x = np.ones(100, np.float32)
    with pytest.raises(tl.TileShapeError, match=r"cannot broadcast shapes \[64\] with \[3\]") as err:
        kernel[1](x, x.copy())
    assert err.value.loc.file == __file__ and "tl.zeros((3,))" in open(__file__).readlines()[err.value.loc.line - 1]
    with pytest.raises(tl.TileArgumentError, match="TILE set by the autotuner's configs") as err:
        kernel[1](x, x.copy(), TILE=64)
    assert err.value.loc.file == __file__


def test_without_a_timer_the_cpu_takes_the_first_config_that_runs(cache):
    kernel = tl.autotune(configs=[tl.Config(TILE=4096, num_threads=32), *CONFIGS], key=["x"])(
        tl.tile_kernel(_accumulate, backend="cpu")
    )
    out, expected = _launch(kernel)
    np.testing.assert_array_equal(out, expected)
    assert kernel.tunings[0]["chosen"] == "TILE=64 threads=32 stages=3"
    assert list(kernel.tunings[0]["times_ms"]) == ["TILE=4096 threads=32 stages=3", "TILE=64 threads=32 stages=3"]


class _Terminal:
    def __init__(self):
        self.text = ""

    def write(self, s):
        self.text += s

    def flush(self):
        pass

    def isatty(self):
        return True


def test_the_progress_line(cache, capsys, monkeypatch):
    _launch(_tuned())
    err = capsys.readouterr().err
    assert err == "autotune _accumulate x=1000 on cpu: chose TILE=128 threads=64 stages=3 in " + err.split(" in ")[-1]
    assert err.endswith(" s\n") and err.count("\n") == 1
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    _launch(_tuned(), n=999)
    assert (
        "\r" in terminal.text
        and "1/3 configs, best 3.0000 ms" in terminal.text
        and "3/3 configs, best 1.0000 ms" in terminal.text
    )
    monkeypatch.setattr(sys, "stderr", sys.__stderr__)
    _launch(_tuned(quiet=True), n=998)
    monkeypatch.setenv("TILELANG_AUTOTUNE_QUIET", "1")
    _launch(_tuned(), n=997)
    assert capsys.readouterr().err == ""


def test_wrong_uses_are_clear_errors():
    kernel = tl.tile_kernel(_accumulate, backend="cpu")
    with pytest.raises(tl.TileArgumentError, match="not a tl.Constant"):
        tl.autotune(configs=[tl.Config(TILE=64, WIDTH=3)])(kernel)
    with pytest.raises(tl.TileArgumentError, match="key names `y`"):
        tl.autotune(configs=CONFIGS, key=["y"])(kernel)
    with pytest.raises(tl.TileArgumentError, match="BK, BM, BN"):
        tl.autotune(key=["x"])(kernel)
    with pytest.raises(tl.TileArgumentError, match="above @tl.tile_kernel"):
        tl.autotune(configs=CONFIGS)(_accumulate)
    with pytest.raises(tl.TileArgumentError, match="TILE set by the autotuner"):
        tl.autotune(configs=CONFIGS)(kernel)[(1,)](np.ones(4, np.float32), np.ones(4, np.float32), TILE=64)


def test_the_default_dot_configs_fit():
    configs = dot_configs()
    assert configs[0] == tl.Config(BM=128, BN=256, BK=64, num_threads=256, num_stages=4)  # (wgmma only)
    assert configs[1] == tl.Config(BM=128, BN=256, BK=64, num_threads=512, num_stages=4)
    for c in configs:
        bm, bn, bk = c.constants["BM"], c.constants["BN"], c.constants["BK"]
        assert bm * bn // c.num_threads <= (128 if c is configs[0] else 64) and c.num_threads <= 512
        assert c.num_stages * (bm + bn) * bk * 2 <= 200 * 1024
    assert len(set(configs)) == len(configs) >= 6


def test_the_float8_dot_configs_put_k_steps_of_128_bytes_first():
    """dot_configs(8): the float8 shapes measured best on the H100 first (BK 128: a swizzle row
    of bytes; the best, 128x256x128 at 256 threads, takes 128 accumulators a thread), each
    within 200 KB of float8 stages; then the 16-bit list."""
    configs = dot_configs(8)
    assert configs[0] == tl.Config(BM=128, BN=256, BK=128, num_threads=256, num_stages=4)
    assert all(c.constants["BK"] == 128 for c in configs[:4]) and configs[4:] == dot_configs(16)[: len(configs) - 4]
    for c in configs:
        bm, bn, bk = c.constants["BM"], c.constants["BN"], c.constants["BK"]
        assert c.num_stages * (bm + bn) * bk <= 200 * 1024


def test_bench_and_sweep_on_the_cpu(tmp_path, capsys):
    calls = []
    ms = tl.testing.bench(lambda: calls.append(1), warmup=2, rep=5, device="cpu")
    assert ms >= 0 and len(calls) == 7
    implementations = {"one": lambda n: lambda: None, "two": lambda n: None if n == 1 else (lambda: None)}
    results = tl.testing.sweep(
        [1, 2], implementations, metric=lambda n, ms: n, unit="things", title="demo", device="cpu", rep=2, warmup=0
    )
    assert results == {"one": [1, 2], "two": [None, 2]}
    assert capsys.readouterr().out.splitlines()[:5] == [
        "demo (things)",
        "",
        "| size | one | two |",
        "|---|---|---|",
        "| 1 | 1 | - |",
    ]
    with pytest.raises(ValueError, match="device"):
        tl.testing.bench(lambda: None, device="tpu")
    for bad in (dict(rep=2.5), dict(warmup=1.5), dict(rep="5"), dict(rep=True)):  # (raw TypeErrors from range)
        with pytest.raises(ValueError, match="rep must be an int"):
            tl.testing.bench(lambda: None, device="cpu", **bad)
    from tilelang._runtime import gpu_available

    if not gpu_available():
        with pytest.raises(ValueError, match="no CUDA GPU here"):  # (numba's CudaSupportError)
            tl.testing.bench(lambda: None, device="cuda")
    with pytest.raises(ValueError, match="at least one implementation"):  # (a malformed table)
        tl.testing.sweep([1], {}, device="cpu")


def test_sweep_without_matplotlib_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    tl.testing.sweep([1], {"one": lambda n: lambda: None}, plot=str(tmp_path / "p.png"), device="cpu", rep=1)
    assert "matplotlib is not installed" in capsys.readouterr().out and not (tmp_path / "p.png").exists()


@pytest.mark.gpu
@pytest.mark.skipif(not tl._runtime.gpu_available(), reason="needs an NVIDIA GPU")
def test_tuning_on_the_gpu_times_every_config(cache):
    """On CUDA each config is timed with CUDA events; the choice is the fastest measured and
    a later tuner (as a new process) takes it from the disk without timing."""
    kernel = tl.autotune(configs=CONFIGS, key=["x"])(tl.tile_kernel(_accumulate))
    out, expected = _launch(kernel, n=1 << 20)
    np.testing.assert_array_equal(out, expected)
    times = kernel.tunings[0]["times_ms"]
    assert all(isinstance(ms, float) and ms > 0 for ms in times.values())
    assert kernel.tunings[0]["chosen"] == min(times, key=times.get)
    again = tl.autotune(configs=CONFIGS, key=["x"])(tl.tile_kernel(_accumulate))
    out, expected = _launch(again, n=1 << 20)
    np.testing.assert_array_equal(out, expected)
    assert again.tunings == []


@pytest.mark.skipif(tl._runtime.gpu_available(), reason="checks the machine without a GPU")
def test_tuning_for_cuda_without_a_gpu_says_so(cache):
    """Not each config's failure (a wait on no GPU: TypeError), the launch's own error."""
    kernel = tl.autotune(configs=CONFIGS, key=["x"])(tl.tile_kernel(_accumulate))
    with pytest.raises(tl.TileArgumentError, match="needs an NVIDIA GPU"):
        kernel[_grid(256)](np.ones(256, np.float32), np.zeros(256, np.float32), backend="cuda")


@tl.tile_kernel
def _fill(out, steps, TILE: tl.Constant):
    """out = ``steps`` ones summed slowly (a sine each): the work a stream is busy with when tuning starts."""
    i = tl.block_id(0)
    v = (tl.arange(0, TILE) + i * TILE).astype(tl.float32)
    acc = tl.zeros((TILE,), tl.float32)
    for k in tl.range(0, steps):
        acc += tl.sin(v + k.astype(tl.float32)) * 0.0 + 1.0
    tl.store(out, acc, index=(i,))


@pytest.mark.gpu
@pytest.mark.skipif(not tl._runtime.gpu_available(), reason="needs an NVIDIA GPU")
def test_tuning_on_a_non_blocking_stream_times_it_and_restores_what_it_made(cache):
    """``stream=`` a non-blocking stream still making the written array (for longer than the
    first config takes to compile): the trials' snapshot waits for it (copied before, on the
    default stream, the restore put back what was there before the fill) and the timer's
    events go on that stream (on the default stream they waited for nothing: every config
    timed as ~0)."""
    from cuda.bindings import driver
    from numba import cuda

    cuda.current_context()  # (a current context for the driver's stream)
    err, handle = driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)
    assert err == driver.CUresult.CUDA_SUCCESS
    try:
        n, steps = 1 << 24, 1 << 14  # (~1e11 sines: a large fraction of a second)
        x = cuda.to_device(np.ones(n, np.float32))
        out = cuda.device_array(n, np.float32)
        kernel = tl.autotune(configs=CONFIGS, key=["x"])(tl.tile_kernel(_accumulate))
        _fill[n // 1024](out, steps, TILE=1024, stream=int(handle))
        kernel[_grid(n)](x, out, stream=int(handle))
        driver.cuStreamSynchronize(handle)
        np.testing.assert_array_equal(out.copy_to_host(), np.full(n, steps + 2, np.float32))
        times = kernel.tunings[0]["times_ms"]
        assert all(ms > 0.02 for ms in times.values()), times  # (>= 200 MB moved: 0.04 ms at 5 TB/s)
    finally:
        driver.cuStreamDestroy(handle)


def test_a_variant_keeps_the_kernels_options_and_takes_the_configs():
    """Each config's kernel: its threads, stages and ``copies_first``; the kernel's own
    backend, checks and target (``arch``) kept. Configs differ by ``copies_first`` alone."""
    kernel = tl.tile_kernel(_accumulate, backend="cpu", arch="sm_80", debug=True)
    tuned = tl.autotune(configs=CONFIGS, key=["x"])(kernel)
    first = tl.Config(TILE=128, num_threads=64, num_stages=2, copies_first=True)
    assert first != tl.Config(TILE=128, num_threads=64, num_stages=2) and "copies first" in first.label()
    v = tuned.variant(first)
    assert (v.num_threads, v.num_stages, v.copies_first) == (64, 2, True), vars(v)
    assert (v.backend, v.arch, v.debug) == ("cpu", "sm_80", True), vars(v)
    assert tuned.variant(tl.Config(TILE=128, num_threads=64, num_stages=2)).copies_first is False


# ------------------------------------------------------------- edges (a helper's hunt, session 19)


def test_a_debug_kernel_and_a_written_default_argument_tune(cache):
    """Its checks' hidden error buffer is no argument to copy (every config failed: KeyError),
    nor is a written array left to its default (KeyError too)."""
    out_default = np.zeros(256, np.float32)

    def accumulate_into(x, out=out_default, TILE: tl.Constant = 64):
        _accumulate(x, out, TILE)

    for kernel in (
        tl.tile_kernel(_accumulate, backend="cpu", debug=True),
        tl.tile_kernel(accumulate_into, backend="cpu"),
    ):
        tuned = tl.autotune(configs=CONFIGS, key=lambda args: args["out"].shape, timer=_fake_timer([]))(kernel)
        x, out = np.ones(256, np.float32), out_default
        out[:] = 1
        tuned[_grid(256)](*((x, out) if kernel.__name__ == "_accumulate" else (x,)))
        np.testing.assert_array_equal(out, 3)  # (each trial put back; the chosen launch once)


def test_a_config_whose_grid_cuda_cannot_launch_is_skipped(cache):
    configs = [tl.Config(TILE=1), tl.Config(TILE=64)]
    tuned = tl.autotune(configs=configs, key=["x"])(tl.tile_kernel(_accumulate, backend="cpu"))
    x, out = np.ones(70_000, np.float32), np.zeros(70_000, np.float32)
    tuned[lambda args: (1, tl.cdiv(70_000, args["TILE"]))](x, out)  # TILE=1: grid y 70000 > 65535
    assert (
        tuned.tunings[0]["chosen"].startswith("TILE=64")
        and "grid sizes" in tuned.tunings[0]["times_ms"][configs[0].label()]
    )


def test_the_cache_is_keyed_on_the_kernels_own_options_and_survives_an_unusable_directory(cache, monkeypatch):
    """A choice made at num_threads=128 was reused at 32 (where it may not compile: every later
    process failed); a TILELANG_CACHE_DIR that is a file raised FileExistsError at every launch."""
    kernel = tl.tile_kernel(_accumulate, backend="cpu", num_threads=128)
    paths = {tl.autotune(configs=CONFIGS, key=["x"])(k)._cache_path(("k",), "cpu") for k in
             (kernel, kernel.with_options(num_threads=32), kernel.with_options(debug=True))}  # fmt: skip
    assert len(paths) == 3
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(cache / "a-file"))
    (cache / "a-file").write_text("")
    out, expected = _launch(_tuned())
    np.testing.assert_array_equal(out, expected)


def test_a_cached_choice_that_fails_is_tuned_again(cache, caplog):
    tuned = _tuned()
    _launch(tuned)
    (entry,) = (cache / "autotune").iterdir()
    record = json.loads(entry.read_text())
    too_large = tl.Config(TILE=4096, num_threads=32)  # 128 elements a thread: refused when compiled
    entry.write_text(json.dumps(record | {"index": 0, "chosen": too_large.label()}))
    again = _tuned(configs=[too_large] + CONFIGS[1:])
    again._cache_path = lambda key, backend: str(entry)
    with caplog.at_level(logging.WARNING, logger="tilelang.autotune"):
        out, expected = _launch(again)
    np.testing.assert_array_equal(out, expected)
    assert "tuning again" in caplog.text and again.tunings


def test_keys_and_configs_given_oddly_are_taken_or_refused_clearly(cache):
    kernel = tl.tile_kernel(_accumulate, backend="cpu")
    one = tl.autotune(configs=tl.Config(TILE=64), key=None)(kernel)  # one config, no key
    out, expected = _launch(one)
    np.testing.assert_array_equal(out, expected)
    shapes = tl.autotune(configs=CONFIGS, key=lambda args: (args["x"].shape, args["out"].shape))(kernel)
    out, expected = _launch(shapes)  # (1-d shapes in a key function's value: the progress line read p[1])
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(tl.TileArgumentError, match="key names `TILE`, which the configs set"):
        tl.autotune(configs=CONFIGS, key=["TILE"])(kernel)
    with pytest.raises(tl.TileArgumentError, match="copies_first is True or False"):
        tl.Config(TILE=64, copies_first="no")
    with pytest.raises(tl.TileArgumentError, match=r"test_autotune.py:\d+.*launched over a grid of blocks"):
        one(np.ones(4, np.float32), np.ones(4, np.float32))
    with pytest.raises(tl.TileArgumentError, match=r"argument `x`: expected an array or a scalar, got list"):
        one[1]([1.0] * 64, np.ones(64, np.float32))
    assert isinstance(tl.autotune(tl.tile_kernel(_matmul_like)), tl.autotune(configs=CONFIGS)(kernel).__class__)


def _matmul_like(a, c, BM: tl.Constant, BN: tl.Constant, BK: tl.Constant):
    tl.store(c, tl.load(a, index=(0, 0), shape=(BM, BN)), index=(0, 0))


def test_the_disk_key_sees_an_objects_attributes():
    """A frozen dataclass or a plain object a kernel reads was fingerprinted by its type alone:
    a cached choice for another value was reused (and failed to compile)."""
    import dataclasses

    from tilelang._frontend.captures import _stable

    @dataclasses.dataclass(frozen=True)
    class Settings:
        groups: int

    class Plain:
        def __init__(self, groups):
            self.groups = groups

    texts = [_stable(v) for v in (Settings(4), Settings(3), Plain(4), Plain(3))]
    assert len(set(texts)) == 4 and all("0x" not in t for t in texts)
    # (a review: no repr, which sets order by hash and may raise; cycles end at once, at any stack depth)
    tree = Plain(1)
    tree.children, tree.me = [Plain(2), Plain(3)], tree
    for child in tree.children:
        child.parent = child.left = child.right = tree
    assert _stable(tree) == (lambda: _stable(tree))() and "a " in _stable(tree)
    frozen = dataclasses.make_dataclass("Frozen", [("tags", frozenset)], frozen=True)
    assert _stable(frozen(frozenset({"b", "a", "c"}))) == _stable(frozen(frozenset({"c", "a", "b"})))

    class Raising(Plain):
        def __repr__(self):
            raise AttributeError("not yet")

    assert "'groups': 1" in _stable(Raising(1))


def test_a_constant_in_the_key_configs_from_a_generator_and_a_wrong_grid_function():
    def scaled(x, out, DT: tl.Constant, TILE: tl.Constant):
        i = tl.block_id(0)
        tl.store(out, tl.load(x, index=(i,), shape=(TILE,)).astype(DT), index=(i,))

    tuned = tl.autotune(configs=(c for c in CONFIGS[:2]), key=["x", "DT"])(tl.tile_kernel(scaled, backend="cpu"))
    x = np.ones(256, np.float32)
    out = np.zeros(256, np.float32)
    tuned[_grid(256)](x, out, DT=tl.float32)  # (a DType in the key: refused as "not an array" for a moment)
    assert len(tuned.configs) == 2 and (out == 1).all()
    with pytest.raises(tl.TileArgumentError, match=r"test_autotune.py:\d+.*grid sizes must be ints.*15.625"):
        tuned[lambda args: (1000 / args["TILE"],)](x, out, DT=tl.float32)  # the call's mistake, not a limit
