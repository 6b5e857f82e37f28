//! (being written)

use super::{Extracted, Format, Options, Unreadable};

pub fn extract_in_child(
    _exe: &std::path::Path,
    format: Format,
    bytes: &[u8],
    options: &Options,
) -> Result<Extracted, Unreadable> {
    super::extract_here(format, bytes, &options.limits)
}
