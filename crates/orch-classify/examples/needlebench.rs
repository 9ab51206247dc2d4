use aho_corasick::Span;
use aho_corasick::packed::{Config, MatchKind, Searcher};
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let needles: Vec<String> = std::fs::read_to_string(&a[1])
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let hay = std::fs::read(&a[2]).unwrap();
    let s: Searcher = Config::new()
        .match_kind(MatchKind::LeftmostFirst)
        .heuristic_pattern_limits(false)
        .builder()
        .extend(&needles)
        .build()
        .unwrap();
    let t = std::time::Instant::now();
    let (mut n, mut from) = (0, 0);
    while let Some(m) = s.find_in(&hay, Span::from(from..hay.len())) {
        n += 1;
        from = m.start() + 1;
    }
    println!("{} needles: {} hits in {:?}", needles.len(), n, t.elapsed());
}
