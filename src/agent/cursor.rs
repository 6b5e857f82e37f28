//! The page cursor of `search_docs`: an opaque string naming the index snapshot a search ran on
//! and how many hits it has served, authenticated with a secret of the store, so that a cursor
//! cannot be forged, altered, or carried to another store or another query.
//!
//! A cursor is `c2.` and the hex of the generation (8 bytes, little-endian), the snapshot's
//! layout key (8), the vector index's marker key (8; 0 when the search used none), the offset
//! (4) and a 16-byte MAC (`ids::cursor_mac`) over those bytes and
//! the query and filters it continues. It holds nothing secret; it only cannot be made without
//! the key, which lives in `<store>/cursor.key` (made on first use, never sent anywhere).

use std::io::Write;
use std::path::Path;

use crate::ids::{self, Generation};

/// The file in a store folder that holds the cursor key.
pub(crate) const CURSOR_KEY_FILE: &str = "cursor.key";

const PREFIX: &str = "c2.";
const BODY_LEN: usize = 8 + 8 + 8 + 4;
const MAC_LEN: usize = 16;

/// Where the next page starts: which snapshot, and after how many hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub generation: Generation,
    pub layout: u64,
    /// `vectors::Marker::key` of the vector index the search used; 0 for none.
    pub vectors: u64,
    pub offset: u32,
}

/// The secret cursors are sealed with.
pub struct CursorKey([u8; 32]);

impl CursorKey {
    /// The key of the store in `dir`, made on first use. When the folder cannot take the file
    /// (a read-only store), a key of this process alone: its cursors are then refused, with the
    /// same clear error as any foreign cursor, by any other process.
    pub(crate) fn of_store(dir: &Path) -> CursorKey {
        let path = dir.join(CURSOR_KEY_FILE);
        for _ in 0..2 {
            if let Ok(bytes) = std::fs::read(&path)
                && let Ok(key) = <[u8; 32]>::try_from(bytes.as_slice())
            {
                return CursorKey(key);
            }
            let key = CursorKey::random();
            // Written aside and linked into place, so that two servers starting at once agree
            // on one key and neither ever reads half a file.
            let aside = dir.join(format!(".{CURSOR_KEY_FILE}.{}", uuid::Uuid::new_v4()));
            let written = std::fs::File::create_new(&aside)
                .and_then(|mut file| file.write_all(&key.0).and_then(|()| file.sync_all()));
            let linked = written.and_then(|()| std::fs::hard_link(&aside, &path));
            let _ = std::fs::remove_file(&aside);
            match linked {
                Ok(()) => return key,
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(err) => {
                    tracing::warn!(
                        path = %path.display(),
                        %err,
                        "cannot keep a cursor key in the store; cursors hold for this process only"
                    );
                    return key;
                }
            }
        }
        CursorKey::random()
    }

    /// A fresh random key.
    pub fn random() -> CursorKey {
        let mut key = [0u8; 32];
        key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        CursorKey(key)
    }

    /// The cursor as text, bound to `request` (the query and filters it continues).
    pub(crate) fn seal(&self, cursor: &Cursor, request: &[u8]) -> String {
        let body = body(cursor);
        let mac = self.mac(&body, request);
        let mut text = String::from(PREFIX);
        for byte in body.iter().chain(mac.iter()) {
            text.push_str(&format!("{byte:02x}"));
        }
        text
    }

    /// The cursor in `text`, if this key sealed it for `request`; otherwise why not.
    pub fn open(&self, text: &str, request: &[u8]) -> Result<Cursor, String> {
        let foreign = || {
            "cursor is not one this store gave for this query and these filters (it was altered, \
             comes from another store, or belongs to another search)\nhint: repeat the search \
             without a cursor, then pass its next_cursor with the same query and filters"
                .to_string()
        };
        let hex = text.strip_prefix(PREFIX).ok_or_else(foreign)?;
        if hex.len() != 2 * (BODY_LEN + MAC_LEN) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(foreign());
        }
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("checked hex digits"))
            .collect();
        let (body, mac) = bytes.split_at(BODY_LEN);
        // Every byte compared, with no early exit, so the time taken says nothing of how much
        // of a guessed MAC was right.
        let expected = self.mac(body, request);
        let difference = expected
            .iter()
            .zip(mac)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if difference != 0 {
            return Err(foreign());
        }
        let word =
            |from: usize| u64::from_le_bytes(body[from..from + 8].try_into().expect("8 bytes"));
        Ok(Cursor {
            generation: Generation(word(0)),
            layout: word(8),
            vectors: word(16),
            offset: u32::from_le_bytes(body[24..28].try_into().expect("4 bytes")),
        })
    }

    fn mac(&self, body: &[u8], request: &[u8]) -> [u8; MAC_LEN] {
        let mut data = Vec::with_capacity(body.len() + request.len());
        data.extend_from_slice(body);
        data.extend_from_slice(request);
        let full = ids::cursor_mac(&self.0, &data);
        full[..MAC_LEN].try_into().expect("a MAC has 32 bytes")
    }
}

fn body(cursor: &Cursor) -> [u8; BODY_LEN] {
    let mut body = [0u8; BODY_LEN];
    body[..8].copy_from_slice(&cursor.generation.0.to_le_bytes());
    body[8..16].copy_from_slice(&cursor.layout.to_le_bytes());
    body[16..24].copy_from_slice(&cursor.vectors.to_le_bytes());
    body[24..].copy_from_slice(&cursor.offset.to_le_bytes());
    body
}

#[cfg(test)]
mod tests {
    use super::{Cursor, CursorKey};
    use crate::ids::Generation;

    #[test]
    fn a_cursor_opens_only_with_its_key_and_request() {
        let key = CursorKey::random();
        let cursor = Cursor {
            generation: Generation(7),
            layout: 42,
            vectors: 5,
            offset: 10,
        };
        let text = key.seal(&cursor, b"query");
        assert_eq!(key.open(&text, b"query"), Ok(cursor));
        assert!(key.open(&text, b"other query").is_err());
        assert!(CursorKey::random().open(&text, b"query").is_err());
        let mut altered = text.clone().into_bytes();
        let last = altered.len() - 1;
        altered[last] = if altered[last] == b'0' { b'1' } else { b'0' };
        assert!(
            key.open(&String::from_utf8(altered).expect("ascii"), b"query")
                .is_err()
        );
        assert!(key.open("c1.zz", b"query").is_err());
        assert!(key.open("", b"query").is_err());
    }

    #[test]
    fn a_store_keeps_one_key() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cursor = Cursor {
            generation: Generation(1),
            layout: 2,
            vectors: 0,
            offset: 3,
        };
        let text = CursorKey::of_store(dir.path()).seal(&cursor, b"q");
        assert_eq!(
            CursorKey::of_store(dir.path()).open(&text, b"q"),
            Ok(cursor)
        );
    }
}
