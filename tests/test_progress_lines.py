"""Progress in a log file: plain lines when the output is not a terminal (portfed._progress)."""

import io

from rich.console import Console
from rich.progress import Progress

from portfed._progress import EVERY_SECONDS, PlainProgress, make_progress, progress_bar
from portfed.sweep import Task, run_tasks


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _count_to(n, report):
    for done in range(1, n + 1):
        report(done)
    return n


def test_a_non_terminal_stream_gets_plain_lines_while_a_phase_runs():
    stream = io.StringIO()
    console = Console(file=stream)  # a StringIO is not a terminal
    bar = make_progress(console=console)
    assert isinstance(bar, PlainProgress)
    with bar:
        task = bar.add_task("training", total=100)
        for i in range(50):
            bar.advance(task)
            if i == 24:
                middle = stream.getvalue()
    assert "training: 20/100 (20 %)" in middle  # printed while the phase runs, not only at its end
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("training: 0/100 (0 %)")
    assert [line.split(":")[1].split("(")[0].strip() for line in lines] == [f"{k}/100" for k in range(0, 60, 10)]
    assert "eta" in lines[-1]


def test_a_slow_task_prints_at_least_every_thirty_seconds():
    stream, clock = io.StringIO(), FakeClock()
    bar = PlainProgress(stream, clock=clock)
    task = bar.add_task("fit", total=1000)
    clock.now = EVERY_SECONDS - 1
    bar.advance(task)
    assert len(stream.getvalue().splitlines()) == 1  # 0.1 % and 29 s: nothing yet
    clock.now = EVERY_SECONDS + 1
    bar.advance(task)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].startswith("fit: 2/1000") and "elapsed 0:31" in lines[1]


def test_completion_is_printed_once_and_a_disabled_bar_prints_nothing():
    stream = io.StringIO()
    bar = PlainProgress(stream)
    task = bar.add_task("backtest", total=3, completed=1)
    bar.update(task, advance=2, description="backtest UCRP")
    bar.advance(task, 0)
    assert stream.getvalue().splitlines()[-1].startswith("backtest UCRP: 3/3 (100 %)")
    assert sum("100 %" in line for line in stream.getvalue().splitlines()) == 1
    quiet = io.StringIO()
    silent = PlainProgress(quiet, disable=True)
    silent.advance(silent.add_task("x", total=1))
    assert quiet.getvalue() == ""


def test_a_terminal_keeps_the_rich_bar():
    assert isinstance(make_progress(console=Console(file=io.StringIO(), force_terminal=True)), Progress)


def test_the_runners_print_lines_into_a_redirected_standard_output(capsys):
    with progress_bar("local performance", total=4) as advance:
        for _ in range(4):
            advance(1)
    run_tasks([Task("fedavg", 20, _count_to, args=(20,))], progress=True)
    out = capsys.readouterr().out  # pytest's captured stdout is not a terminal
    assert "local performance: 2/4 (50 %)" in out and "local performance: 4/4 (100 %)" in out
    assert "fedavg: 10/20 (50 %)" in out and "fedavg: 20/20 (100 %)" in out


def test_the_fig1c_diagnostic_announces_its_cost_and_is_off_in_make_run():
    from pathlib import Path

    from portfed.experiment.config import load_config
    from portfed.experiment.party.diagnostics import diagnostic_cost

    default = Path(__file__).parents[1] / "configs" / "default.yaml"
    assert load_config(default).diagnostics.interpolation_rounds == []
    on = load_config(default, ["diagnostics.interpolation_rounds=[4,19,39]"])
    assert diagnostic_cost(on, 10) == ("Fig. 1c diagnostic: 3 rounds × 10 parties × 12 models = 360 greedy passes "
                                       "over 252 days")
