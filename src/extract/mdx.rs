//! (being written)

use super::{Deadline, Extracted, Limits, Structure};

pub(crate) const VERSION: u32 = 1;

pub(crate) fn extract(text: &str, _limits: &Limits, _deadline: &Deadline) -> Extracted {
    Extracted::as_is(text.to_string(), Structure::Paragraphs)
}
