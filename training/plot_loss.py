#!/usr/bin/env python3
"""plot_loss.py — the loss curve of a train.py run as a PNG (gnuplot, from Debian gnuplot-nox).

Training loss (one mini-batch every 10 steps, mixed corpora) and held-out loss per corpus (4 windows of 512
tokens each, every ~20 s), against wall-clock training time. Writes nothing but the PNG.
Usage: training/plot_loss.py training/results/train_results.json training/loss_curve.png
"""
import json
import os
import subprocess
import sys
import tempfile

CORPORA = ["bible", "fortunes", "jargon", "promessi", "chat"]


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().split("\n")[-1], file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        res = json.load(f)
    with tempfile.TemporaryDirectory() as td:
        train_dat = os.path.join(td, "train.dat")
        with open(train_dat, "w") as f:
            for p in res["loss_curve"]:
                f.write(f"{p['t']} {p['loss']}\n")
        eval_dat = os.path.join(td, "eval.dat")
        with open(eval_dat, "w") as f:
            for e in res["eval_curve"]:
                f.write(" ".join(str(x) for x in [e["t"]] + [e[c] for c in CORPORA]) + "\n")
        title = (f"DeepSeek V4 tiny-chat: {res['steps']} steps, {res['tokens_seen'] / 1e6:.1f}M tokens, "
                 f"{res['train_seconds']:.0f} s on one {res['versions']['gpu']}")
        plots = [f"'{train_dat}' using 1:2 with lines lw 1 lc rgb '#999999' title 'train (mini-batch)'"]
        for i, c in enumerate(CORPORA):
            plots.append(f"'{eval_dat}' using 1:{i + 2} with linespoints lw 2 pt 7 ps 0.5 title 'held-out {c}'")
        script = "\n".join([
            "set terminal pngcairo size 900,540 font 'sans,10'",
            f"set output '{os.path.abspath(argv[2])}'",
            f"set title \"{title}\"",
            "set xlabel 'training time (s)'",
            "set ylabel 'cross-entropy (nats/token)'",
            "set grid",
            "set key top right",
            "set yrange [3:12.5]",
            "plot " + ", ".join(plots),
        ])
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
