"""Turn measured results into fixed-width text and markdown tables."""

from __future__ import annotations

MiB = 2**20
REL_TOL = 1e-3


def fmt_seconds(t) -> str:
    """3 significant digits in s, ms or us."""
    if not isinstance(t, (int, float)):
        return "n/a"
    if t >= 1:
        return f"{t:.3g}s"
    return f"{t * 1e3:.3g}ms" if t >= 1e-3 else f"{t * 1e6:.3g}us"


def fmt_mib(nbytes) -> str:
    return "n/a" if nbytes is None else f"{nbytes / MiB:.0f}MiB"


def fmt_ratio(r, percent: bool = False) -> str:
    if r is None:
        return "n/a"
    return f"{100 * r:.0f}%" if percent else f"{r:.2f}"


def text_table(headers, rows) -> str:
    """Fixed-width table: first column left-aligned, others right-aligned."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]

    def line(cells):
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(headers), line("-" * w for w in widths)] + [line(r) for r in rows])


def markdown_table(headers, rows) -> str:
    out = ["| " + " | ".join(headers) + " |",
           "|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def check_samples(results: dict) -> str:
    """Compare each implementation's sample to dask's (or numpy's) value."""
    samples = {k: r["sample"] for k, r in results.items() if "sample" in r}
    ref_name = next((k for k in ("dask", "numpy") if k in samples), None)
    if ref_name is None or len(samples) < 2:
        return "-"
    ref = samples[ref_name]
    bad = [k for k, s in samples.items() if abs(s - ref) > REL_TOL * max(abs(ref), 1e-12)]
    return "ok" if not bad else "DIFF:" + ",".join(bad)


class Footnotes:
    """Collect error messages and hand out short ``[n]`` markers."""

    def __init__(self):
        self.notes = []

    def mark(self, text: str) -> str:
        if text not in self.notes:
            self.notes.append(text)
        return f"n/a[{self.notes.index(text) + 1}]"

    def render(self) -> str:
        return "\n".join(f"  [{i}] {n}" for i, n in enumerate(self.notes, 1))
