//! (being written)

use super::{Deadline, Extracted, Limits, Unreadable};

pub(crate) const VERSION: u32 = 1;

pub(crate) fn extract(
    _bytes: &[u8],
    _limits: &Limits,
    _deadline: &Deadline,
) -> Result<Extracted, Unreadable> {
    Err("PDF is not read yet".to_string())
}
