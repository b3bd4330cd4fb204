"""An estimate of a job's iteration period that shares nothing with the observer's: numpy bins
the frames given on stdin ("<unix ns> <bytes>" per line) on the grid given as arguments
(bin ns, first bin's start ns), scipy autocorrelates the byte series, and the autocorrelation's
peaks at 1, 2, 3... periods are fitted by least squares through the origin (each peak placed
between bins by a parabola through it and its neighbours). Prints the period in ns, or fails
with a message when the series shows none."""

import sys

import numpy as np
from scipy.signal import correlate, find_peaks


def period_bins(x):
    x = x - x.mean()
    ac = correlate(x, x, mode="full", method="fft")[len(x) - 1 :]
    if ac[0] <= 0:
        sys.exit("a flat series has no period")
    ac = ac / ac[0]
    half = len(ac) // 2
    # Past the first zero crossing: the bumps of a phase's own shape are not periods.
    below = np.flatnonzero(ac[:half] < 0)
    if len(below) == 0:
        sys.exit("the autocorrelation never falls below zero: no period")
    first = below[0]
    peaks, _ = find_peaks(ac[first:half])
    if len(peaks) == 0:
        sys.exit("no autocorrelation peak in the first half of the series")
    peaks = peaks + first
    p0 = int(peaks[np.argmax(ac[peaks])])
    ks, lags = [], []
    # Each multiple's peak searched around where the estimate so far puts it (a whole-bin p0
    # drifts from the true multiples), placed between bins by a parabola at a true maximum.
    estimate = float(p0)
    k = 1
    while round(k * estimate) + p0 // 4 + 1 < half:
        centre = int(round(k * estimate))
        lo, hi = max(1, centre - p0 // 4), centre + p0 // 4 + 1
        i = lo + int(np.argmax(ac[lo:hi]))
        y0, y1, y2 = ac[i - 1], ac[i], ac[i + 1]
        if y1 >= y0 and y1 >= y2 and y0 - 2 * y1 + y2 < 0:
            shift = min(0.5, max(-0.5, 0.5 * (y0 - y2) / (y0 - 2 * y1 + y2)))
            ks.append(k)
            lags.append(i + shift)
            estimate = float(np.dot(ks, lags) / np.dot(ks, ks))
        k += 1
    if not ks:
        sys.exit("no autocorrelation peak at a multiple of the first")
    ks = np.array(ks, dtype=float)
    lags = np.array(lags, dtype=float)
    return float(ks @ lags / (ks @ ks))


def main():
    bin_ns, start_ns = int(sys.argv[1]), int(sys.argv[2])
    frames = np.loadtxt(sys.stdin, dtype=np.int64, ndmin=2)
    if frames.size == 0:
        sys.exit("no frames")
    bins = (frames[:, 0] - start_ns) // bin_ns
    if bins.min() < 0:
        sys.exit("a frame before the first bin")
    x = np.bincount(bins, weights=frames[:, 1].astype(float))
    print(round(period_bins(x) * bin_ns))


if __name__ == "__main__":
    main()
