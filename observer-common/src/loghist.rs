//! The bucket arithmetic of the log-scale histograms (latency, message sizes): each octave
//! split linearly into 2^`sub_bits` buckets, one bucket below the first octave and one above
//! the last. Written by hand: it must compile for the BPF target with constant scales (no
//! floating point, no loops in the bucket index), and HdrHistogram-style crates do not.

/// A log-scale bucket layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogScale {
    /// The first octave starts at 2^`min_shift`; bucket 0 holds everything below.
    pub min_shift: u32,
    /// Octaves covered; the last bucket holds everything from 2^(`min_shift` + `octaves`).
    pub octaves: u32,
    /// Buckets per octave: 2^`sub_bits` (at most 2^`min_shift`).
    pub sub_bits: u32,
}

impl LogScale {
    /// Buckets: below the first octave, the octaves' sub-buckets, above the last.
    pub const fn buckets(&self) -> usize {
        2 + (self.octaves << self.sub_bits) as usize
    }

    /// The bucket of `v`.
    #[inline(always)]
    pub const fn bucket(&self, v: u64) -> usize {
        if v < 1 << self.min_shift {
            return 0;
        }
        let e = 63 - v.leading_zeros();
        if e >= self.min_shift + self.octaves {
            return self.buckets() - 1;
        }
        let sub = (v >> (e - self.sub_bits)) as usize & ((1 << self.sub_bits) - 1);
        let i = 1 + (((e - self.min_shift) as usize) << self.sub_bits) + sub;
        // Bounded for the verifier.
        if i < self.buckets() {
            i
        } else {
            self.buckets() - 1
        }
    }

    /// The values bucket `i` holds: [lo, hi) (`u64::MAX` for the last).
    pub const fn bounds(&self, i: usize) -> (u64, u64) {
        if i == 0 {
            return (0, 1 << self.min_shift);
        }
        if i >= self.buckets() - 1 {
            return (1 << (self.min_shift + self.octaves), u64::MAX);
        }
        let k = (i - 1) as u64;
        let e = self.min_shift as u64 + (k >> self.sub_bits);
        let sub = k & ((1 << self.sub_bits) - 1);
        let step = 1u64 << (e - self.sub_bits as u64);
        let lo = (1u64 << e) + sub * step;
        (lo, lo + step)
    }

    /// The `q` quantile (0..=1) of `buckets`: the bucket holding it, interpolated linearly
    /// inside it (as Prometheus's `histogram_quantile` does), kept within the exact extremes
    /// `min` and `max`.
    pub fn quantile(&self, buckets: &[u64], min: u64, max: u64, q: f64) -> Option<u64> {
        let total: u64 = buckets.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).max(1.0);
        let mut below = 0u64;
        for (i, n) in buckets.iter().enumerate() {
            if *n == 0 {
                continue;
            }
            if (below + n) as f64 >= rank {
                let (lo, hi) = self.bounds(i);
                let (lo, hi) = (lo.max(min), hi.min(max.saturating_add(1)));
                let inside = (rank - below as f64) / *n as f64;
                let v = lo as f64 + inside * hi.saturating_sub(lo) as f64;
                // Inside the bucket, [lo, hi): its top is the next bucket's.
                let v = (v as u64).min(hi.saturating_sub(1)).max(lo);
                // Not `clamp`: the kernel's extremes are written racily and may cross.
                return Some(v.max(min).min(max));
            }
            below += n;
        }
        Some(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: LogScale = LogScale {
        min_shift: 4,
        octaves: 4,
        sub_bits: 2,
    };

    #[test]
    fn every_value_lies_in_its_bucket() {
        for v in 0..600u64 {
            let (lo, hi) = S.bounds(S.bucket(v));
            assert!(lo <= v && v < hi, "{v}: [{lo}, {hi})");
        }
        assert_eq!(S.bucket(15), 0);
        assert_eq!(S.bucket(16), 1);
        assert_eq!(S.bucket(20), 2);
        assert_eq!(S.bucket(255), S.buckets() - 2);
        assert_eq!(S.bucket(256), S.buckets() - 1);
        assert_eq!(S.bucket(u64::MAX), S.buckets() - 1);
    }

    #[test]
    fn quantiles_are_exact_for_one_value_and_within_a_bucket_otherwise() {
        let mut b = [0u64; 18];
        b[S.bucket(100)] = 10;
        assert_eq!(S.quantile(&b, 100, 100, 0.5), Some(100));
        b[S.bucket(200)] = 10;
        let p99 = S.quantile(&b, 100, 200, 0.99).unwrap();
        let (lo, hi) = S.bounds(S.bucket(200));
        assert!(lo <= p99 && p99 <= 200 && p99 < hi, "{p99}");
        assert_eq!(S.quantile(&[0; 18], 0, 0, 0.5), None);
        // The top of a bucket is the next one's bottom: a quantile stays below it.
        let mut b = [0u64; 18];
        b[S.bucket(1)] = 10;
        b[S.bucket(100)] = 1;
        assert_eq!(S.bucket(S.quantile(&b, 1, 100, 0.5).unwrap()), S.bucket(1));
    }
}
