//! Float32 matrix products by the `gemm` crate (its AVX-512 or AVX2/FMA kernels, chosen at run
//! time), on strided views of plain slices: the weight products write into reused buffers,
//! and attention reads a head's query, key and value where they lie in the rows of the
//! projection and writes its context into the rows of the output, with no copy between.
//!
//! What needs `unsafe`, and why it holds: `gemm::gemm` takes pointers and strides. `multiply`
//! checks, before calling it, that the shapes agree and that the last element of every view
//! (the largest offset its strides reach) lies inside its slice; the output is a `&mut` slice,
//! so no operand can alias it. It runs on the calling thread (`Parallelism::None`): the caller
//! runs one pack per thread.

/// `rows × columns` values of a slice: element `(i, j)` at `i × row_stride + j × column_stride`.
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    pub values: &'a [f32],
    pub rows: usize,
    pub columns: usize,
    pub row_stride: usize,
    pub column_stride: usize,
}

impl<'a> View<'a> {
    /// A row-major matrix: `values` is `rows` rows of `columns`.
    pub(crate) fn rows(values: &'a [f32], rows: usize, columns: usize) -> View<'a> {
        View {
            values,
            rows,
            columns,
            row_stride: columns,
            column_stride: 1,
        }
    }

    /// The same values, rows and columns swapped.
    pub(crate) fn transposed(self) -> View<'a> {
        View {
            rows: self.columns,
            columns: self.rows,
            row_stride: self.column_stride,
            column_stride: self.row_stride,
            ..self
        }
    }
}

/// `rows × columns` values of a slice to be written, laid out as in [`View`].
pub(crate) struct ViewMut<'a> {
    pub values: &'a mut [f32],
    pub rows: usize,
    pub columns: usize,
    pub row_stride: usize,
    pub column_stride: usize,
}

impl<'a> ViewMut<'a> {
    /// A row-major matrix: `values` is `rows` rows of `columns`.
    pub(crate) fn rows(values: &'a mut [f32], rows: usize, columns: usize) -> ViewMut<'a> {
        ViewMut {
            values,
            rows,
            columns,
            row_stride: columns,
            column_stride: 1,
        }
    }
}

/// Whether every element a view's shape and strides reach lies inside its `len` values.
fn inside(
    len: usize,
    rows: usize,
    columns: usize,
    row_stride: usize,
    column_stride: usize,
) -> bool {
    if rows == 0 || columns == 0 {
        return true;
    }
    let last = (rows - 1)
        .checked_mul(row_stride)
        .and_then(|rows| (columns - 1).checked_mul(column_stride)?.checked_add(rows));
    // gemm computes offsets as `isize`.
    last.is_some_and(|last| last < len && isize::try_from(last).is_ok())
}

/// Whether no two elements of a view's shape share an offset, as an output's must not: its rows
/// or its columns lie one after the other without overlapping.
fn distinct(rows: usize, columns: usize, row_stride: usize, column_stride: usize) -> bool {
    if rows <= 1 || columns <= 1 {
        return (rows <= 1 || row_stride > 0) && (columns <= 1 || column_stride > 0);
    }
    let span = |count: usize, stride: usize| (count - 1).checked_mul(stride);
    span(columns, column_stride).is_some_and(|span| row_stride > span)
        || span(rows, row_stride).is_some_and(|span| column_stride > span)
}

/// `out = lhs × rhs`.
///
/// # Panics
/// When the shapes do not agree (`lhs` is `m × k`, `rhs` `k × n`, `out` `m × n`), a view
/// reaches past its slice, or two of the output's elements share a value.
pub(crate) fn multiply(lhs: View, rhs: View, out: ViewMut) {
    let (m, k, n) = (lhs.rows, lhs.columns, rhs.columns);
    assert!(
        rhs.rows == k && out.rows == m && out.columns == n,
        "a product of {m} × {k} and {} × {n} into {} × {}",
        rhs.rows,
        out.rows,
        out.columns
    );
    for (name, len, rows, columns, row_stride, column_stride) in [
        (
            "left",
            lhs.values.len(),
            m,
            k,
            lhs.row_stride,
            lhs.column_stride,
        ),
        (
            "right",
            rhs.values.len(),
            k,
            n,
            rhs.row_stride,
            rhs.column_stride,
        ),
        (
            "output",
            out.values.len(),
            m,
            n,
            out.row_stride,
            out.column_stride,
        ),
    ] {
        assert!(
            inside(len, rows, columns, row_stride, column_stride),
            "the {name} operand's {rows} × {columns} at strides {row_stride}, {column_stride} reaches past its {len} values"
        );
    }
    assert!(
        distinct(m, n, out.row_stride, out.column_stride),
        "the output's {m} × {n} at strides {}, {} has elements that share a value",
        out.row_stride,
        out.column_stride
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                out.values[i * out.row_stride + j * out.column_stride] = 0.0;
            }
        }
        return;
    }
    // A stride along a dimension of one element is never multiplied by anything but 0, so it
    // is passed as 0; every other stride is at most its view's last offset, which `inside`
    // checked fits an `isize`.
    let stride = |value: usize, count: usize| {
        if count <= 1 {
            0
        } else {
            isize::try_from(value).expect("checked by `inside`")
        }
    };
    // SAFETY: `gemm` reads `lhs` at `i × lhs_rs + p × lhs_cs` and `rhs` at `p × rhs_rs + j ×
    // rhs_cs`, and writes `out` at `i × dst_rs + j × dst_cs`, for `i < m`, `p < k`, `j < n`;
    // `inside` held for each (above), so every such offset is inside its slice. `out` is a
    // unique borrow, so nothing read is written. With `read_dst` false the output's old values
    // are not read (`alpha` 0, `beta` 1: `out = lhs × rhs`).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.values.as_mut_ptr(),
            stride(out.column_stride, n),
            stride(out.row_stride, m),
            false,
            lhs.values.as_ptr(),
            stride(lhs.column_stride, k),
            stride(lhs.row_stride, m),
            rhs.values.as_ptr(),
            stride(rhs.column_stride, n),
            stride(rhs.row_stride, k),
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::kernels::values;

    fn at(view: &View, i: usize, j: usize) -> f32 {
        view.values[i * view.row_stride + j * view.column_stride]
    }

    /// Products of row-major, transposed and strided views (a head's query and key as they lie
    /// in a projection's rows, the context written into every other column) equal plain sums,
    /// and nothing outside the output's elements is written.
    #[test]
    fn strided_products_are_the_plain_products() {
        for (m, k, n) in [
            (1, 1, 1),
            (1, 32, 7),
            (7, 32, 1),
            (7, 1, 7),
            (7, 32, 7),
            (45, 64, 33),
            (130, 384, 96),
        ] {
            // The left operand is columns `3..3 + k` of rows `k + 5` wide; the right the
            // transpose of a row-major `n × k` at a row stride of `k + 2`.
            let wide = values(m * (k + 5), (m + k) as u64);
            let lhs = View {
                values: &wide[3..],
                rows: m,
                columns: k,
                row_stride: k + 5,
                column_stride: 1,
            };
            let source = values(n * (k + 2), (k * n) as u64);
            let rhs = View {
                values: &source,
                rows: n,
                columns: k,
                row_stride: k + 2,
                column_stride: 1,
            }
            .transposed();
            // The output every other value of rows `2n` wide, the rest left as NaN.
            let mut out = vec![f32::NAN; m * 2 * n];
            multiply(
                lhs,
                rhs,
                ViewMut {
                    values: &mut out,
                    rows: m,
                    columns: n,
                    row_stride: 2 * n,
                    column_stride: 2,
                },
            );
            for i in 0..m {
                for j in 0..n {
                    let want: f32 = (0..k).map(|p| at(&lhs, i, p) * at(&rhs, p, j)).sum();
                    let got = out[i * 2 * n + j * 2];
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{m}×{k}×{n}: ({i}, {j}): {got} against {want}"
                    );
                    assert!(out[i * 2 * n + j * 2 + 1].is_nan(), "({i}, {j}) spilled");
                }
            }
        }
    }

    #[test]
    fn no_inner_dimension_gives_zeros_and_views_past_their_slice_are_refused() {
        let mut out = vec![f32::NAN; 6];
        multiply(
            View::rows(&[], 2, 0),
            View::rows(&[], 0, 3),
            ViewMut::rows(&mut out, 2, 3),
        );
        assert_eq!(out, vec![0.0; 6]);

        let short = values(11, 1);
        let refused = std::panic::catch_unwind(|| {
            let mut out = vec![0.0; 4];
            multiply(
                View::rows(&short, 2, 6),
                View::rows(&short, 6, 2),
                ViewMut::rows(&mut out, 2, 2),
            );
        });
        assert!(refused.is_err(), "a 2 × 6 view of 11 values was read");
        let refused = std::panic::catch_unwind(|| {
            let mut out = vec![0.0; 3];
            multiply(
                View::rows(&short[..4], 2, 2),
                View::rows(&short[..4], 2, 2),
                ViewMut::rows(&mut out, 2, 2),
            );
        });
        assert!(refused.is_err(), "a 2 × 2 output was written into 3 values");
        let refused = std::panic::catch_unwind(|| {
            let mut out = vec![0.0; 4];
            multiply(
                View::rows(&short[..6], 2, 3),
                View::rows(&short[..4], 2, 2),
                ViewMut::rows(&mut out, 2, 2),
            );
        });
        assert!(refused.is_err(), "a 2 × 3 by 2 × 2 product ran");
        // An output whose rows overlap: element (0, 1) is element (1, 0).
        let refused = std::panic::catch_unwind(|| {
            let mut out = vec![0.0; 4];
            multiply(
                View::rows(&short[..4], 2, 2),
                View::rows(&short[..4], 2, 2),
                ViewMut {
                    values: &mut out,
                    rows: 2,
                    columns: 2,
                    row_stride: 1,
                    column_stride: 1,
                },
            );
        });
        assert!(
            refused.is_err(),
            "an output with overlapping rows was written"
        );
        assert!(distinct(2, 3, 3, 1) && distinct(2, 3, 1, 2) && distinct(1, 5, 0, 1));
        assert!(!distinct(2, 3, 2, 1) && !distinct(3, 1, 0, 1) && !distinct(2, 2, 1, 1));
    }
}
