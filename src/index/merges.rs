//! Which segments the index writer merges, and how many merges run at once.
//!
//! Tantivy's log merge policy groups segments of about the same size into levels and merges a
//! level whole once it holds eight or more. Nothing bounds what such a merge makes: a bulk load
//! of a million files left levels of segments each under a million documents, and merged each
//! level into one segment of several million, mapping every input segment at once (1.3 GiB of a
//! 1.6 GiB index, at the end of the run). Here each level is split into merges of at most
//! `MAX_MERGE_DOCS` documents, and the writer runs one merge at a time
//! (`MERGE_THREADS`), so the segments a merge maps stay bounded however large the store.

use std::collections::HashMap;

use tantivy::index::{SegmentId, SegmentMeta};
use tantivy::indexer::LogMergePolicy;
use tantivy::merge_policy::{MergeCandidate, MergePolicy};

/// Segments under this many documents (what the commits of small runs make) form a level of
/// their own, so a run that edits one file merges a few small segments, never a small one into
/// the large ones of a bulk load.
const MIN_LAYER_DOCS: u32 = 1_000;

/// No merge makes a segment of more documents than this, and a segment of more is not merged
/// again.
pub(super) const MAX_MERGE_DOCS: u32 = 1_000_000;

/// Merges the writer runs at once. Each maps its input segments; on a two-core machine a second
/// merge thread did not shorten a cold ingest.
pub(super) const MERGE_THREADS: usize = 1;

/// Tantivy's log merge policy, each of its merges split so none makes a segment of more than
/// `max_docs` documents.
#[derive(Debug)]
pub(super) struct BoundedMerges {
    levels: LogMergePolicy,
    max_docs: u32,
}

impl BoundedMerges {
    pub(super) fn new() -> BoundedMerges {
        let mut levels = LogMergePolicy::default();
        levels.set_min_layer_size(MIN_LAYER_DOCS);
        levels.set_max_docs_before_merge(MAX_MERGE_DOCS as usize);
        BoundedMerges {
            levels,
            max_docs: MAX_MERGE_DOCS,
        }
    }
}

impl MergePolicy for BoundedMerges {
    fn compute_merge_candidates(&self, segments: &[SegmentMeta]) -> Vec<MergeCandidate> {
        let docs: HashMap<SegmentId, u32> = segments
            .iter()
            .map(|segment| (segment.id(), segment.max_doc()))
            .collect();
        self.levels
            .compute_merge_candidates(segments)
            .into_iter()
            .flat_map(|candidate| split(candidate, &docs, self.max_docs))
            .collect()
    }
}

/// Splits one merge into merges of at most `max_docs` documents each (counting the deleted
/// ones, which the inputs still hold), smallest segments first; a segment left alone is not
/// merged.
fn split(
    candidate: MergeCandidate,
    docs: &HashMap<SegmentId, u32>,
    max_docs: u32,
) -> Vec<MergeCandidate> {
    let mut segments: Vec<(u32, SegmentId)> = candidate
        .0
        .into_iter()
        .map(|id| (docs.get(&id).copied().unwrap_or(u32::MAX), id))
        .collect();
    segments.sort_unstable();
    let mut merges = Vec::new();
    let mut group: Vec<SegmentId> = Vec::new();
    let mut group_docs: u64 = 0;
    for (segment_docs, id) in segments {
        if !group.is_empty() && group_docs + u64::from(segment_docs) > u64::from(max_docs) {
            merges.push(std::mem::take(&mut group));
            group_docs = 0;
        }
        group.push(id);
        group_docs += u64::from(segment_docs);
    }
    merges.push(group);
    merges
        .into_iter()
        .filter(|group| group.len() > 1)
        .map(MergeCandidate)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use tantivy::index::SegmentId;
    use tantivy::merge_policy::MergePolicy;

    use super::{BoundedMerges, MAX_MERGE_DOCS};

    fn segments(sizes: &[u32]) -> Vec<tantivy::index::SegmentMeta> {
        let index = tantivy::Index::create_in_ram(tantivy::schema::Schema::builder().build());
        sizes
            .iter()
            .map(|&docs| index.new_segment_meta(SegmentId::generate_random(), docs))
            .collect()
    }

    /// The merges the policy asks for, each as its segments' sizes, and the sizes.
    fn merges_of(sizes: &[u32]) -> Vec<Vec<u32>> {
        let metas = segments(sizes);
        let docs: HashMap<SegmentId, u32> = metas
            .iter()
            .map(|meta| (meta.id(), meta.max_doc()))
            .collect();
        BoundedMerges::new()
            .compute_merge_candidates(&metas)
            .into_iter()
            .map(|candidate| {
                let mut sizes: Vec<u32> = candidate.0.iter().map(|id| docs[id]).collect();
                sizes.sort_unstable();
                sizes
            })
            .collect()
    }

    #[test]
    fn a_level_of_large_segments_is_merged_in_parts_under_the_bound() {
        // Twelve segments of 300k documents: Tantivy's policy merges them into one of 3.6M.
        let merges = merges_of(&[300_000; 12]);
        assert_eq!(merges.len(), 4, "{merges:?}");
        for merge in &merges {
            assert!(merge.len() >= 2, "{merges:?}");
            assert!(merge.iter().sum::<u32>() <= MAX_MERGE_DOCS, "{merges:?}");
        }
        assert_eq!(merges.iter().map(Vec::len).sum::<usize>(), 12);
    }

    #[test]
    fn small_levels_merge_as_tantivy_would() {
        // Eight small segments: one merge of all of them.
        assert_eq!(merges_of(&[2_000; 8]), vec![vec![2_000; 8]]);
        // Under eight of a size: nothing to merge yet.
        assert!(merges_of(&[2_000; 7]).is_empty());
    }

    #[test]
    fn segments_too_large_to_pair_are_left_alone() {
        assert!(merges_of(&[600_000; 8]).is_empty());
        assert!(merges_of(&[1_200_000; 9]).is_empty());
    }
}
