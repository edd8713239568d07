"""The echo of a job's output to the terminal (``trainmon.runtime.capture.records.Echo``): the bytes as
the job wrote them, however its reads were cut, and each point after the line it came from."""

from __future__ import annotations

from trainmon.runtime.capture.records import Echo


def _echoed(capsysbinary, reads: list[list[tuple[bytes, int, int]]], points_after: int) -> bytes:
    echo = Echo(prefix_hosts=False, live_metrics=True)
    for number, pieces in enumerate(reads):
        if number == points_after:
            echo.point("loss", 0.5, "algo-1", 3)
        echo.passthrough(False, pieces)
    return capsysbinary.readouterr().out  # type: ignore[no-any-return]


def test_pieces_are_echoed_as_written_and_a_point_follows_the_last_whole_line(capsysbinary) -> None:
    first, second = b"..abc\nde", b"f\ngh\rgi"  # pieces of two buffers read back from the spool
    out = _echoed(capsysbinary, [[(first, 2, len(first)), (second, 0, 5)], [(second, 5, len(second))]], 0)
    assert out == b"abc\ndef\n  \xc2\xbb loss = 0.5   (algo-1, record 4)\ngh\rgi"


def test_a_point_waits_while_the_line_is_a_progress_bar_without_its_end(capsysbinary) -> None:
    reads = [b"epoch 1\n10%|#  \r", b"50%|### \r", b"100%\n"]
    out = _echoed(capsysbinary, [[(read, 0, len(read))] for read in reads], 1)
    assert out == b"".join(reads) + b"  \xc2\xbb loss = 0.5   (algo-1, record 4)\n"


def test_reads_without_any_line_end_are_echoed_whole(capsysbinary) -> None:
    data = b"xx" * 100
    out = _echoed(capsysbinary, [[(data, 0, 50), (data, 50, 200)]], 5)
    assert out == data
