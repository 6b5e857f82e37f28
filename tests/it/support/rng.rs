//! The tests' seeded random numbers.

/// A small deterministic random number generator (xorshift64*), seeded and printed by tests.
pub struct Rng(u64);

impl Rng {
    /// Seeded from `GROUNDIDX_TEST_SEED`, else from the clock; prints the seed.
    pub fn from_env(test: &str) -> Rng {
        let seed = std::env::var("GROUNDIDX_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{test}: GROUNDIDX_TEST_SEED={seed}");
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
