//! Run ids: `<experiment>-<YYYYMMDD>-<HHMMSS>-<salt>`, readable, sorted by time when listed, and
//! unlikely to collide when several orch processes create runs in the same second (the caller
//! retries on a collision anyway: the id is claimed by creating its directory).

use std::time::SystemTime;

/// A fresh id for a run of `experiment`.
pub fn new_run_id(experiment: &str) -> String {
    let stamp: String = super::now()
        .chars()
        .filter(|c| c.is_ascii_digit())
        .take(14)
        .collect();
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let salt = (nanos ^ std::process::id().rotate_left(16)) & 0xffff;
    format!("{experiment}-{}-{}-{salt:04x}", &stamp[..8], &stamp[8..])
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_name_the_experiment_and_the_time() {
        let id = super::new_run_id("diamonds-seed0");
        let parts: Vec<&str> = id.rsplitn(4, '-').collect();
        assert_eq!(parts[3], "diamonds-seed0");
        assert_eq!((parts[2].len(), parts[1].len(), parts[0].len()), (8, 6, 4));
    }
}
