//! The snippet of a hit: the passage of its text with the most of the query's terms, the terms
//! marked.
//!
//! The passage is the one Tantivy's `SnippetGenerator` picks, found the same way: the text's
//! tokens are cut into fragments of at most `max_chars` bytes (a fragment ends before the token
//! that would pass the limit, and the next begins at that token), each scored by the weights of
//! the terms in it, and the best is kept: the highest score, of equals the one that begins (then
//! ends) first. What differs is the look-up. Tantivy's generator looks every token up by a lower-cased copy, an
//! allocation per word of the passage (and, for an empty word, an AVX-512 masked compare at a
//! dangling address that costs a microcode assist); here a token is compared with the terms as
//! it is, only when its first letter begins one of them, and nothing is allocated per word. A
//! token the analyzer made is already lower case. `snippets_are_tantivy_s` holds the two to the
//! same fragment and marks.

use std::ops::Range;

use tantivy::tokenizer::{TextAnalyzer, TokenStream};

/// The query's terms, as the analyzer makes them, each with its weight.
#[derive(Clone)]
pub(crate) struct Terms {
    /// Sorted by term, each once, none empty.
    weights: Vec<(String, f32)>,
    /// The first letter of each term, sorted, each once.
    first_letters: Vec<char>,
}

impl Terms {
    pub(crate) fn new(weights: impl IntoIterator<Item = (String, f32)>) -> Terms {
        let mut weights: Vec<(String, f32)> = weights
            .into_iter()
            .filter(|(term, _)| !term.is_empty())
            .collect();
        weights.sort_by(|a, b| a.0.cmp(&b.0));
        weights.dedup_by(|a, b| a.0 == b.0);
        let mut first_letters: Vec<char> = weights
            .iter()
            .filter_map(|(term, _)| term.chars().next())
            .collect();
        first_letters.sort_unstable();
        first_letters.dedup();
        Terms {
            weights,
            first_letters,
        }
    }

    /// The terms themselves, sorted.
    pub(crate) fn words(&self) -> impl Iterator<Item = &str> {
        self.weights.iter().map(|(term, _)| term.as_str())
    }

    fn weight(&self, word: &str) -> Option<f32> {
        let first = word.chars().next()?;
        self.first_letters.binary_search(&first).ok()?;
        self.weights
            .binary_search_by(|(term, _)| term.as_str().cmp(word))
            .ok()
            .map(|at| self.weights[at].1)
    }
}

/// The best fragment of a text: where it begins and ends, and its marked terms (byte ranges
/// of the text).
#[derive(Debug, PartialEq)]
pub(crate) struct Fragment {
    pub range: Range<usize>,
    pub marks: Vec<Range<usize>>,
}

/// The best fragment of `text` for `terms`, tokenised by `analyzer`, at most `max_chars`
/// bytes; `None` when no term is in it.
pub(crate) fn best_fragment(
    analyzer: &mut TextAnalyzer,
    terms: &Terms,
    text: &str,
    max_chars: usize,
) -> Option<Fragment> {
    let mut stream = analyzer.token_stream(text);
    let mut best: Option<(f32, Fragment)> = None;
    let mut score = 0.0f32;
    let mut current = Fragment {
        range: 0..0,
        marks: Vec::new(),
    };
    // Keeps a finished fragment that scores if it is at least as good as the best so far, as
    // `Iterator::max_by` over Tantivy's order does: the higher score, and of equal scores the
    // fragment that begins (then ends) first.
    let finish = |score: f32, fragment: Fragment, best: &mut Option<(f32, Fragment)>| {
        // Tantivy keeps a fragment whose score is greater than zero (a NaN is not).
        if score.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            return;
        }
        let better = |(top, kept): &(f32, Fragment)| match top.partial_cmp(&score) {
            Some(std::cmp::Ordering::Equal) | None => {
                (fragment.range.start, fragment.range.end) <= (kept.range.start, kept.range.end)
            }
            Some(order) => order == std::cmp::Ordering::Less,
        };
        if best.as_ref().is_none_or(better) {
            *best = Some((score, fragment));
        }
    };
    while let Some(token) = stream.next() {
        if token.offset_to.wrapping_sub(current.range.start) > max_chars {
            let next = Fragment {
                range: token.offset_from..token.offset_from,
                marks: Vec::new(),
            };
            finish(score, std::mem::replace(&mut current, next), &mut best);
            score = 0.0;
        }
        current.range.end = token.offset_to;
        if let Some(weight) = terms.weight(&token.text) {
            score += weight;
            current.marks.push(token.offset_from..token.offset_to);
        }
    }
    finish(score, current, &mut best);
    best.map(|(_, fragment)| fragment)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use tantivy::snippet::SnippetGenerator;

    use super::{Terms, best_fragment};
    use crate::index::tokenizer;

    fn tantivy_s(
        weights: &BTreeMap<String, f32>,
        text: &str,
        max_chars: usize,
    ) -> (String, Vec<std::ops::Range<usize>>) {
        let field = tantivy::schema::Field::from_field_id(0);
        let snippet =
            SnippetGenerator::new(weights.clone(), tokenizer::analyzer(), field, max_chars)
                .snippet(text);
        (
            snippet.fragment().to_string(),
            snippet.highlighted().to_vec(),
        )
    }

    fn ours(
        weights: &BTreeMap<String, f32>,
        text: &str,
        max_chars: usize,
    ) -> (String, Vec<std::ops::Range<usize>>) {
        let terms = Terms::new(weights.iter().map(|(term, weight)| (term.clone(), *weight)));
        let mut analyzer = tokenizer::highlighter(terms.words());
        match best_fragment(&mut analyzer, &terms, text, max_chars) {
            Some(fragment) => (
                text[fragment.range.clone()].to_string(),
                fragment
                    .marks
                    .iter()
                    .map(|mark| mark.start - fragment.range.start..mark.end - fragment.range.start)
                    .collect(),
            ),
            None => (String::new(), Vec::new()),
        }
    }

    /// The query's terms as the whole analyzer makes them.
    fn weights_of(query: &[&str], weight_of: impl Fn(usize) -> f32) -> BTreeMap<String, f32> {
        let mut analyzer = tokenizer::analyzer();
        let mut weights = BTreeMap::new();
        for (i, word) in query.iter().enumerate() {
            let mut stream = analyzer.token_stream(word);
            while let Some(token) = stream.next() {
                weights.insert(token.text.clone(), weight_of(i));
            }
        }
        weights
    }

    const WORDS: [&str; 28] = [
        "run",
        "running",
        "Runs",
        "generalization",
        "tie",
        "ties",
        "cry",
        "cried",
        "happy",
        "rotation",
        "signing",
        "KEY",
        "keys",
        "stored",
        "index",
        "dying",
        "sky",
        "skies",
        "eip-1559",
        "EIP1559",
        "onERC721Received",
        "MAX_EFFECTIVE_BALANCE",
        "Straße",
        "ÉCOLE",
        "日本語",
        "İstanbul",
        "ΣΟΦΙΑ",
        "v2.3.1",
    ];
    const GLUE: [&str; 6] = [" ", ", ", ". ", "\n\n", " -- ", "/"];

    #[test]
    fn a_text_without_the_terms_has_no_fragment_and_an_empty_term_is_none() {
        let weights = weights_of(&["rotation"], |_| 1.0);
        assert_eq!(
            ours(&weights, "nothing to see here", 240),
            (String::new(), Vec::new())
        );
        let mut with_empty = weights.clone();
        with_empty.insert(String::new(), 1.0);
        let terms = Terms::new(with_empty);
        assert_eq!(terms.words().collect::<Vec<_>>(), ["rotat"]);
    }

    #[test]
    fn of_equal_fragments_the_first_is_kept_and_a_better_later_one_wins() {
        let weights = weights_of(&["key", "rotation"], |i| [1.0, 2.0][i]);
        let text = format!(
            "key one. {} key two. {} rotation three.",
            "x ".repeat(30),
            "y ".repeat(30)
        );
        for max_chars in [20, 40, 240] {
            assert_eq!(
                ours(&weights, &text, max_chars),
                tantivy_s(&weights, &text, max_chars)
            );
        }
        let (fragment, marks) = ours(&weights, &text, 20);
        assert!(fragment.contains("rotation"), "{fragment:?}");
        assert_eq!(marks.len(), 1);
    }

    proptest! {
        /// The fragment and marks are Tantivy's `SnippetGenerator`'s with the whole analyzer,
        /// for any text of identifiers, inflections, capitals and other scripts, any query of
        /// them, any weights and any length.
        #[test]
        fn snippets_are_tantivy_s(
            words in proptest::collection::vec((0usize..WORDS.len(), 0usize..GLUE.len()), 0..160),
            query in proptest::collection::vec(0usize..WORDS.len(), 1..5),
            weights in proptest::collection::vec(1u32..5, 5),
            max_chars in prop_oneof![Just(240usize), 1usize..400],
        ) {
            let mut text = String::new();
            for (word, glue) in &words {
                text.push_str(WORDS[*word]);
                text.push_str(GLUE[*glue]);
            }
            let query: Vec<&str> = query.iter().map(|&i| WORDS[i]).collect();
            let weights = weights_of(&query, |i| weights[i] as f32 * 0.25);
            prop_assert_eq!(ours(&weights, &text, max_chars), tantivy_s(&weights, &text, max_chars));
        }

        /// The same for any text at all (any characters, combining marks, controls) with
        /// queries drawn from its own words: no offset of ours falls inside a character.
        #[test]
        fn snippets_of_any_text_are_tantivy_s(
            text in "\\PC{0,300}|[a-zA-Z0-9 _.\\-\u{300}\u{130}\u{3a3}\u{df}]{0,300}",
            picks in proptest::collection::vec(any::<prop::sample::Index>(), 1..4),
            max_chars in prop_oneof![Just(240usize), 1usize..100],
        ) {
            let words: Vec<&str> = text.split_whitespace().collect();
            prop_assume!(!words.is_empty());
            let query: Vec<&str> = picks.iter().map(|pick| *pick.get(&words)).collect();
            let weights = weights_of(&query, |i| 0.5 + i as f32);
            prop_assert_eq!(ours(&weights, &text, max_chars), tantivy_s(&weights, &text, max_chars));
        }
    }
}
