"""The measured phase: the main thread produces the steady input while a thread samples
every interval and runs the orphan cleanup when due, so neither waits for the other (a
sample reads tables and directories; the input's ticks keep their rate)."""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from bench.pipeline.__main__ import Side, log
from bench.pipeline.source import OrdersDatabase, produce_step
from bench.soak.collect import Collector, Sample
from bench.soak.housekeeping import OrphanCleanup
from bench.soak.report import num, progress

#: seconds of input per produce_step call: the side is checked between calls, and each
#: call's last flush (a few ms) is the only pause in the input
SLICE_S = 5.0


@dataclass
class Measured:
    started: float  # unix seconds
    ended: float = 0.0
    interrupted: bool = False
    produced: int = 0
    samples: list[Sample] = field(default_factory=list)


class Sampler(threading.Thread):
    """A sample at the run's start and every ``interval_s`` after, up to its end."""

    def __init__(
        self, collector: Collector, cleanup: OrphanCleanup, interval_s: float, total_s: float
    ) -> None:
        super().__init__(name="soak-sampler", daemon=True)
        self.collector, self.cleanup = collector, cleanup
        self.interval_s, self.total_s = interval_s, total_s
        self.samples: list[Sample] = []
        self.stop = threading.Event()

    def run(self) -> None:
        started = self.collector.started
        for k in range(int(self.total_s // self.interval_s) + 1):
            if self.stop.wait(max(0.0, started + k * self.interval_s - time.time())):
                return
            try:
                sample = self.collector.sample()
            except Exception:  # the run goes on; the sample's absence shows in the series
                log(f"sample failed:\n{traceback.format_exc()}")
                continue
            self.samples.append(sample)
            print(progress(sample, self.total_s), flush=True)
            self._clean()

    def _clean(self) -> None:
        run: dict[str, Any] | None = self.cleanup.run_if_due(time.time())
        if run is not None and (sum(run["deleted"].values()) or run["errors"]):
            log(f"orphan cleanup: {run['deleted']} files ({num(run['bytes'] / 2**20)} MB) "
                f"deleted in {run['seconds']:.1f} s; errors: {run['errors']}")  # fmt: skip


def measure(
    side: Side,
    db: OrdersDatabase,
    producer: Any,
    topic: str,
    rate: int,
    sampler: Sampler,
    last_rate: list[float | None],
) -> Measured:
    """Produce ``rate`` changes a second until the run's end (or Ctrl-C), sampling."""
    out = Measured(sampler.collector.started)
    end = out.started + sampler.total_s
    sampler.start()
    try:
        while (left := end - time.time()) > 0:
            step = produce_step(db, producer, topic, rate, min(SLICE_S, left))
            out.produced += step.produced
            last_rate[0] = step.achieved
            side.check()
        sampler.join()  # its last sample, at the end
    except KeyboardInterrupt:
        out.interrupted = True
        log("interrupted: stopping the soak")
    finally:
        sampler.stop.set()
        sampler.join()
        out.ended = time.time()
        out.samples = sampler.samples
    return out
