//! Turning the raw bytes of a matching segment into [`Evidence`] text.

use super::Evidence;

/// Evidence text is capped at this many `char`s.
pub(crate) const EVIDENCE_MAX_CHARS: usize = 400;
/// When a segment is longer than this, evidence is cut from a window around the match.
const WINDOW_BEFORE: usize = 120;
const WINDOW_BYTES: usize = 4 * EVIDENCE_MAX_CHARS;

/// Build evidence for a match starting at `at` inside `seg` (one `\r`-segment of one
/// line, without its terminators). `truncated_left` says bytes before `seg[0]` were
/// dropped by the scanner (over-long line).
pub(crate) fn evidence(seg: &[u8], at: usize, line: u64, truncated_left: bool) -> Evidence {
    let (lo, hi) = if seg.len() <= WINDOW_BYTES {
        (0, seg.len())
    } else {
        let lo = at.saturating_sub(WINDOW_BEFORE);
        (lo, (lo + WINDOW_BYTES).min(seg.len()))
    };
    let cleaned = strip_ansi(&seg[lo..hi]);
    let decoded = String::from_utf8_lossy(&cleaned);
    let trimmed = decoded.trim();
    let mut text = String::with_capacity(trimmed.len().min(EVIDENCE_MAX_CHARS * 4) + 8);
    if lo > 0 || truncated_left {
        text.push('…');
    }
    let mut n = 0;
    for c in trimmed.chars() {
        if n == EVIDENCE_MAX_CHARS {
            text.push('…');
            break;
        }
        // Remaining control characters (other than tab) carry no meaning in evidence.
        if c.is_control() && c != '\t' {
            continue;
        }
        text.push(c);
        n += 1;
    }
    Evidence {
        line,
        text,
        rule: None,
    }
}

/// Remove ANSI escape sequences (CSI `ESC [ ... final`, OSC `ESC ] ... BEL|ESC \`,
/// and the short `ESC [intermediates] final` forms).
pub(crate) fn strip_ansi(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b != 0x1b {
            out.push(b);
            i += 1;
            continue;
        }
        match bytes.get(i + 1) {
            Some(b'[') => {
                // CSI: parameter bytes 0x30-0x3F, intermediates 0x20-0x2F, final 0x40-0x7E.
                let mut j = i + 2;
                while j < bytes.len() && (0x20..=0x3f).contains(&bytes[j]) {
                    j += 1;
                }
                i = if j < bytes.len() && (0x40..=0x7e).contains(&bytes[j]) {
                    j + 1
                } else {
                    j
                };
            }
            Some(b']') => {
                // OSC: until BEL or ST (ESC \).
                let mut j = i + 2;
                while j < bytes.len() {
                    if bytes[j] == 0x07 {
                        j += 1;
                        break;
                    }
                    if bytes[j] == 0x1b && bytes.get(j + 1) == Some(&b'\\') {
                        j += 2;
                        break;
                    }
                    j += 1;
                }
                i = j;
            }
            Some(_) => {
                // nF / Fp / Fe / Fs: intermediates 0x20-0x2F, then one final byte
                // (e.g. `ESC ( B`, `ESC =`).
                let mut j = i + 1;
                while j < bytes.len() && (0x20..=0x2f).contains(&bytes[j]) {
                    j += 1;
                }
                i = (j + 1).min(bytes.len());
            }
            None => i += 1,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_csi_and_osc() {
        let s = b"\x1b[36m(TaskRunner pid=1)\x1b[0m \x1b]0;title\x07CUDA \x1b(Bout";
        assert_eq!(strip_ansi(s), b"(TaskRunner pid=1) CUDA out".to_vec());
    }

    #[test]
    fn windows_long_segments_around_the_match() {
        let mut seg = vec![b'x'; 10_000];
        seg.extend_from_slice(b"CUDA out of memory");
        seg.extend(std::iter::repeat_n(b'y', 10_000));
        let ev = evidence(&seg, 10_000, 7, false);
        assert!(ev.text.contains("CUDA out of memory"), "{}", ev.text);
        assert!(ev.text.chars().count() <= EVIDENCE_MAX_CHARS + 2);
        assert!(ev.text.starts_with('…') && ev.text.ends_with('…'));
        assert_eq!(ev.line, 7);
    }

    #[test]
    fn lossy_and_trimmed() {
        let ev = evidence(
            b"  \xff\xfeRuntimeError: CUDA error: out of memory \t ",
            6,
            1,
            false,
        );
        assert_eq!(
            ev.text,
            "\u{fffd}\u{fffd}RuntimeError: CUDA error: out of memory"
        );
    }
}
