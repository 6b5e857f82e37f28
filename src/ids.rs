//! Identity: the hashes that name documents and chunks, and the text normaliser behind them.
//!
//! This is the only module that calls blake3. Every hash input starts with a version tag, so a
//! future change of normalisation or chunking shows up as a visible migration (new IDs), never as
//! a silent re-index under the old names. It does not decide what a chunk is; `chunk` does.
//!
//! A chunk ID names the chunk's exact text (and its normalised heading path), so an ID
//! determines the bytes every reader is served: two passages that differ only in white space
//! are two chunks, and a whitespace edit (an indentation fix in a code block) is a changed
//! chunk. Version 1 hashed the normalised text, so the first whitespace variant ever stored
//! was served for every other; `chunk_id_v1` is kept only to recognise such chunks.

use std::fmt;
use std::str::FromStr;

use unicode_normalization::UnicodeNormalization;

/// Version tag mixed into every chunk ID.
pub(crate) const CHUNK_ID_VERSION: &str = "groundidx-chunk-v2";
/// Version tag of the chunk IDs of an older groundidx, which hashed the normalised text.
const CHUNK_ID_VERSION_1: &str = "groundidx-chunk-v1";
/// Version tag mixed into every idempotency fingerprint.
pub(crate) const FINGERPRINT_VERSION: &str = "groundidx-idem-v1";
/// Version tag mixed into every page cursor's MAC.
pub(crate) const CURSOR_VERSION: &str = "groundidx-cursor-v1";
/// Version tag mixed into every key of an index snapshot's segment layout.
pub(crate) const LAYOUT_VERSION: &str = "groundidx-layout-v1";
/// Version tag mixed into every embedding model fingerprint.
pub(crate) const MODEL_VERSION: &str = "groundidx-model-v1";
/// Version tag mixed into the checksum of every vector index file.
pub(crate) const VECTORS_VERSION: &str = "groundidx-vectors-v1";

macro_rules! hash_newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name([u8; 32]);

        impl $name {
            /// The raw 32 bytes, as stored in the ledger.
            pub fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }

            /// The value of these 32 raw bytes.
            pub fn from_bytes(bytes: [u8; 32]) -> Self {
                Self(bytes)
            }

            /// Rebuilds the value from 32 raw bytes; `None` when the length is wrong.
            pub fn from_slice(bytes: &[u8]) -> Option<Self> {
                bytes.try_into().ok().map(Self)
            }

            /// Lowercase hex, the only form IDs are printed in.
            pub fn to_hex(&self) -> String {
                blake3::Hash::from_bytes(self.0).to_hex().to_string()
            }

            /// The first eight bytes as a number, for compact in-memory sets and fast fields.
            pub fn short(&self) -> u64 {
                u64::from_le_bytes(self.0[..8].try_into().expect("a hash has 32 bytes"))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), &self.to_hex()[..12])
            }
        }

        impl FromStr for $name {
            type Err = InvalidId;

            fn from_str(s: &str) -> Result<Self, InvalidId> {
                if s.len() != 64 || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                    return Err(InvalidId);
                }
                blake3::Hash::from_hex(s).map(|h| Self(*h.as_bytes())).map_err(|_| InvalidId)
            }
        }
    };
}

hash_newtype!(
    /// blake3 of a document's bytes. A renamed file keeps its `DocHash`.
    DocHash
);
hash_newtype!(
    /// blake3 of the version tag, the normalised heading path and the exact chunk text.
    ChunkId
);

/// A string that is not 64 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidId;

impl fmt::Display for InvalidId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a chunk id: expected 64 lowercase hex digits")
    }
}

impl std::error::Error for InvalidId {}

/// The ledger's generation counter. It goes up by one with every ledger commit that changes the
/// set of chunks; the Tantivy commit payload holds the generation the index has applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Generation(pub u64);

impl Generation {
    pub fn next(self) -> Generation {
        Generation(self.0 + 1)
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Hashes a document's bytes.
pub fn doc_hash(bytes: &[u8]) -> DocHash {
    DocHash(*blake3::hash(bytes).as_bytes())
}

/// Hashes a document's bytes in a context (`format::Format::hash_context`): the same bytes in
/// two contexts are two documents. No context is `doc_hash`.
pub(crate) fn doc_hash_in(context: Option<&str>, bytes: &[u8]) -> DocHash {
    match context {
        None => doc_hash(bytes),
        Some(context) => {
            let mut hasher = blake3::Hasher::new_derive_key(context);
            hasher.update(bytes);
            DocHash(*hasher.finalize().as_bytes())
        }
    }
}

/// White space as identity sees it: Unicode white space and the control characters, which are
/// as invisible. `chunk_id` separates its parts with control characters (0x00 and 0x1f), so
/// normalised text, which has none, cannot forge a separator.
pub fn is_space(c: char) -> bool {
    c.is_whitespace() || c.is_control()
}

/// Normalises text for comparison: Unicode NFC, trimmed, every run of white space (and control
/// characters, see `is_space`) folded to one space. Heading paths are named by it (a heading is
/// a path, not a passage), and search folds hits with the same normalised text (`text_key`);
/// a chunk's own text is hashed exactly (`chunk_id`).
pub fn normalise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    if text.is_ascii() {
        // ASCII is NFC, and its white space and control characters are the bytes up to 0x20
        // and 0x7f: one pass over the bytes.
        let mut pending_space = false;
        for &b in text.as_bytes() {
            if b <= 0x20 || b == 0x7f {
                pending_space = !out.is_empty();
            } else {
                if pending_space {
                    out.push(' ');
                    pending_space = false;
                }
                out.push(b as char);
            }
        }
        return out;
    }
    // Most other text is already NFC too; composing it again is the costliest step of ingest,
    // so only text that may not be NFC goes through the composer.
    match unicode_normalization::is_nfc_quick(text.chars()) {
        unicode_normalization::IsNormalized::Yes => fold_space(text.chars(), &mut out),
        _ => fold_space(text.nfc(), &mut out),
    }
    out
}

/// Appends `chars` to `out` trimmed, with every run of `is_space` folded to one space.
fn fold_space(chars: impl Iterator<Item = char>, out: &mut String) {
    let mut pending_space = false;
    for c in chars {
        if is_space(c) {
            pending_space = !out.is_empty();
        } else {
            if pending_space {
                out.push(' ');
                pending_space = false;
            }
            out.push(c);
        }
    }
}

/// The chunk ID of a passage: `blake3("groundidx-chunk-v2" ‖ 0 ‖ each heading normalised ‖ 0x1f
/// … ‖ 0 ‖ text)`, with `text` exactly as the chunker cut it from the file.
///
/// The text is not normalised: an ID then determines the bytes stored under it, so inserting a
/// chunk whose ID is already there (`ON CONFLICT DO NOTHING`) can never keep another variant of
/// the passage. Each heading is normalised on its own and the parts are separated by bytes
/// that normalised text cannot contain, so `["a b"]` and `["a", "b"]` never collide, and the
/// first 0 after the tag ends the headings whatever the text holds.
pub fn chunk_id(heading_path: &[String], text: &str) -> ChunkId {
    let mut hasher = heading_hasher(CHUNK_ID_VERSION, heading_path);
    hasher.update(text.as_bytes());
    ChunkId(*hasher.finalize().as_bytes())
}

/// The ID an older groundidx (chunk ID version 1) gave a passage: its text normalised. Only to
/// recognise chunks of a store made before version 2 (`check_chunk_id`).
fn chunk_id_v1(heading_path: &[String], text: &str) -> ChunkId {
    let mut hasher = heading_hasher(CHUNK_ID_VERSION_1, heading_path);
    hasher.update(normalise(text).as_bytes());
    ChunkId(*hasher.finalize().as_bytes())
}

/// A hasher fed the version tag and the heading path, the part both versions share.
fn heading_hasher(version: &str, heading_path: &[String]) -> blake3::Hasher {
    let mut hasher = blake3::Hasher::new();
    hasher.update(version.as_bytes());
    hasher.update(&[0]);
    for heading in heading_path {
        hasher.update(normalise(heading).as_bytes());
        hasher.update(&[0x1f]);
    }
    hasher.update(&[0]);
    hasher
}

/// What a stored chunk's ID says of its heading path and text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChunkIdCheck {
    /// The ID is `chunk_id` of the heading path and text.
    Current,
    /// The ID is an older groundidx's (version 1), of the normalised text: the stored text may
    /// be another whitespace variant of what the files hold. Reading the files again (the next
    /// ingest of their folders) chunks them anew.
    Outdated,
    /// The ID names neither: the stored text or heading path is not what was hashed.
    Mismatch,
}

/// Recomputes a stored chunk's ID from its heading path and text.
pub(crate) fn check_chunk_id(id: &ChunkId, heading_path: &[String], text: &str) -> ChunkIdCheck {
    if chunk_id(heading_path, text) == *id {
        ChunkIdCheck::Current
    } else if chunk_id_v1(heading_path, text) == *id {
        ChunkIdCheck::Outdated
    } else {
        ChunkIdCheck::Mismatch
    }
}

/// A 64-bit key of a passage's normalised text alone, used by search to drop a second hit with
/// the same text under another heading.
pub fn text_key(text: &str) -> u64 {
    let hash = blake3::hash(normalise(text).as_bytes());
    u64::from_le_bytes(
        hash.as_bytes()[..8]
            .try_into()
            .expect("a hash has 32 bytes"),
    )
}

/// The fingerprint of a tool call: `blake3(version ‖ canonical JSON of {tool, arguments})`.
/// The caller passes the canonical bytes; `keys` owns canonicalisation.
pub fn fingerprint(canonical_json: &[u8]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(FINGERPRINT_VERSION.as_bytes());
    hasher.update(canonical_json);
    *hasher.finalize().as_bytes()
}

/// A 64-bit key of one segment layout of the index (which segments, with which deletes), the
/// same in every process: it tells two snapshots of one generation apart when a merge came
/// between them. The caller passes the layout's bytes; `index` owns what they are.
pub(crate) fn layout_key(layout: &[u8]) -> u64 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(LAYOUT_VERSION.as_bytes());
    hasher.update(layout);
    u64::from_le_bytes(
        hasher.finalize().as_bytes()[..8]
            .try_into()
            .expect("a hash has 32 bytes"),
    )
}

/// The MAC of a page cursor: `blake3` keyed with the store's cursor key, over the version tag
/// and `data`. `cursor` owns what `data` is.
pub(crate) fn cursor_mac(key: &[u8; 32], data: &[u8]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_keyed(key);
    hasher.update(CURSOR_VERSION.as_bytes());
    hasher.update(data);
    *hasher.finalize().as_bytes()
}

/// A hash fed in parts, for inputs too large or too many to hold at once (a model's weights, a
/// vector index file): `blake3(tag ‖ parts…)`. Callers pass `MODEL_VERSION` or `VECTORS_VERSION`
/// and must feed lengths or separators themselves wherever parts could run into each other.
pub(crate) struct StreamHash(blake3::Hasher);

impl StreamHash {
    pub fn new(tag: &str) -> StreamHash {
        let mut hasher = blake3::Hasher::new();
        hasher.update(tag.as_bytes());
        StreamHash(hasher)
    }

    /// Feeds one part, preceded by its length, so that no two sequences of parts collide.
    pub fn part(&mut self, bytes: &[u8]) -> &mut StreamHash {
        self.0.update(&(bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    /// Feeds raw bytes with no length, for a stream whose framing the caller owns.
    pub fn raw(&mut self, bytes: &[u8]) -> &mut StreamHash {
        self.0.update(bytes);
        self
    }

    pub fn finish(&self) -> [u8; 32] {
        *self.0.finalize().as_bytes()
    }
}

/// Every pair of ASCII characters, alone, between words and spaces, and beside a word and a
/// letter that is not ASCII: the texts the ASCII fast paths are checked on.
#[cfg(test)]
pub(crate) fn ascii_pairs() -> impl Iterator<Item = String> {
    (0u8..128).flat_map(|a| {
        (0u8..128).flat_map(move |b| {
            let (a, b) = (a as char, b as char);
            [
                format!("{a}{b}"),
                format!(" x{a}{b}y \t"),
                format!("{a}w {b}"),
                format!("{a}w {b}é"),
            ]
        })
    })
}

#[cfg(test)]
mod tests {
    use super::{ChunkId, ChunkIdCheck, ascii_pairs, check_chunk_id, chunk_id, normalise};

    fn check(input: &str, expect: &str) {
        assert_eq!(normalise(input), expect, "normalise({input:?})");
    }

    #[test]
    fn the_ascii_path_of_normalise_agrees_with_the_general_one() {
        for text in ascii_pairs() {
            let mut general = String::new();
            super::fold_space(text.chars(), &mut general);
            assert_eq!(normalise(&text), general, "{text:?}");
        }
    }

    #[test]
    fn normalise_folds_white_space_and_composes() {
        check("  a  b\n\n c\t", "a b c");
        check("", "");
        check(" \n\t ", "");
        check("cafe\u{301}", "caf\u{e9}");
        check("x\u{a0}y", "x y");
        check("\u{0}a\u{1f}b\u{7f}\u{85}", "a b");
    }

    #[test]
    fn whitespace_edits_change_the_id_of_the_text_but_not_of_the_headings() {
        let heading = vec!["Guide".to_string(), "Install".to_string()];
        // Indentation is meaning in code: two variants are two chunks.
        assert_ne!(
            chunk_id(&heading, "def f():\n    return 1"),
            chunk_id(&heading, "def f():\n  return 1")
        );
        assert_ne!(chunk_id(&heading, "run  it"), chunk_id(&heading, "run it"));
        // A heading is a path: its white space is folded.
        let spaced = vec!["Guide".to_string(), "  Install ".to_string()];
        assert_eq!(chunk_id(&heading, "run it"), chunk_id(&spaced, "run it"));
    }

    #[test]
    fn check_chunk_id_tells_current_outdated_and_altered_chunks_apart() {
        let heading = vec!["Guide".to_string()];
        let text = "def f():\n    return 1";
        let id = chunk_id(&heading, text);
        assert_eq!(check_chunk_id(&id, &heading, text), ChunkIdCheck::Current);
        assert_eq!(
            check_chunk_id(&id, &heading, "def f():\n  return 1"),
            ChunkIdCheck::Mismatch
        );
        assert_eq!(
            check_chunk_id(&id, &["Other".to_string()], text),
            ChunkIdCheck::Mismatch
        );
        // Version 1 hashed the normalised text, so every whitespace variant matched its ID.
        let v1 = super::chunk_id_v1(&heading, text);
        assert_eq!(check_chunk_id(&v1, &heading, text), ChunkIdCheck::Outdated);
        assert_eq!(
            check_chunk_id(&v1, &heading, "def f(): return 1"),
            ChunkIdCheck::Outdated
        );
    }

    /// The version 1 recipe must stay what older stores hold: one ID of the fixture store
    /// (`tests/fixtures/store-v1`), written by groundidx before version 2.
    #[test]
    fn chunk_id_v1_is_the_recipe_of_older_stores() {
        let heading = vec!["Fixture".to_string(), "Fixture store".to_string()];
        let id = super::chunk_id_v1(
            &heading,
            "A store written by groundidx for the schema upgrade test.",
        );
        assert_eq!(
            id.to_hex(),
            "9415425bab9c7ddff1b4b0f08f4b6be2a96b8785e2850bb1587db6fbe8bdece3"
        );
    }

    #[test]
    fn heading_path_is_part_of_identity() {
        let a = chunk_id(&["A".into(), "Install".into()], "same");
        let b = chunk_id(&["B".into(), "Install".into()], "same");
        let joined = chunk_id(&["A Install".into()], "same");
        assert_ne!(a, b);
        assert_ne!(a, joined);
        // A heading holding chunk_id's separator byte is not two headings.
        let forged = chunk_id(&["A\u{1f}Install".into()], "same");
        assert_ne!(a, forged);
    }

    #[test]
    fn hex_round_trips_and_rejects_bad_input() {
        let id = chunk_id(&[], "text");
        let hex = id.to_hex();
        assert_eq!(hex.len(), 64);
        assert_eq!(hex.parse::<ChunkId>(), Ok(id));
        assert!("../etc/passwd".parse::<ChunkId>().is_err());
        assert!(hex.to_uppercase().parse::<ChunkId>().is_err());
    }
}
