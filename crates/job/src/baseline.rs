//! What a gate compares a candidate with: the one place that chooses a baseline, for the
//! command line (`gate`, `report`) and for the quickstart.
//!
//! The rule: a baseline is either an input the user names — a records file, or one run in
//! the store found by a run selector ([`resolve_side`]) — or the history of the candidate,
//! which is always **the newest N earlier runs on the candidate's machine that are
//! comparable to it, never the candidate's own run**. "Comparable" has two forms, one per
//! caller:
//!
//! - per workload ([`history_baseline`], `gate --history N`): for every distinct
//!   (fingerprint, thread count) of the candidate, the newest N runs holding a record with
//!   that fingerprint, measured on the candidate's machine at that thread count, oldest
//!   record first. Any run qualifies (`bench --record`, the quickstart, an ingested file),
//!   and each workload has its own N runs.
//! - per job ([`labelled_history`], the quickstart): the newest N runs on the machine that
//!   the job labelled `key=value` (`job=quickstart-<threads>t`, which fixes the suite and
//!   the thread count), newest run first, every record of each. The job looks it up before
//!   it records the candidate, so the candidate is not among them.
//!
//! The quickstart does not use the per-workload form: that would add runs the quickstart did
//! not make (other suites, other harness settings) and give each workload a different set
//! of runs, while the quickstart's machine-drift check compares whole runs.
//!
//! Left out: a policy of its own (N comes from the caller, the quickstart's from
//! `history.lookback`), age limits, and any check that the runs measured the same build
//! settings beyond fingerprint and thread count; the gate itself decides what a too-short
//! history may conclude.

use crate::error::{JobError, Result};
use std::collections::BTreeSet;
use std::path::Path;
use tensorforge_store::location::{is_missing_file, shown};
use tensorforge_store::{read_records_jsonl, Record, RunInfo, Store};

/// The most runs of history a caller may ask [`resolve_history`] for.
pub const MAX_HISTORY_RUNS: usize = 10_000;

/// The per-workload history of `candidate` in `store`: for every distinct (fingerprint,
/// thread count) among its records, the records of the newest `runs` runs with that
/// fingerprint on the candidate record's machine at that thread count, leaving out every
/// run the candidate's records belong to; per workload oldest first, workloads in the order
/// they first appear in `candidate`. `runs = 0` selects nothing.
pub fn history_baseline(store: &Store, candidate: &[Record], runs: usize) -> Result<Vec<Record>> {
    let own: Vec<String> = candidate.iter().map(|r| r.run_id.clone()).collect();
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for r in candidate {
        if seen.insert((r.fingerprint.clone(), r.harness.threads)) {
            out.extend(store.history_records(
                &r.fingerprint,
                &r.device.machine_id,
                r.harness.threads,
                &own,
                runs,
            )?);
        }
    }
    Ok(out)
}

/// The runs of a job's history and their records (see [`labelled_history`]).
#[derive(Clone, Debug, Default)]
pub struct LabelledHistory {
    /// The runs, newest first.
    pub runs: Vec<RunInfo>,
    /// Every record of those runs, run by run in the order of [`LabelledHistory::runs`],
    /// each run's records in insertion order.
    pub records: Vec<Record>,
}

impl LabelledHistory {
    /// Whether there is no earlier run (the candidate starts the history).
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

/// The per-job history: the newest `runs` runs on `machine_id` whose label `key` is
/// `value`, newest first, with all their records. Call it before the candidate is recorded.
pub fn labelled_history(
    store: &Store,
    machine_id: &str,
    key: &str,
    value: &str,
    runs: usize,
) -> Result<LabelledHistory> {
    let infos = store.recent_runs_with_label(machine_id, key, value, runs)?;
    let mut records = Vec::new();
    for info in &infos {
        records.extend(store.run_records(&info.run_id)?);
    }
    Ok(LabelledHistory {
        runs: infos,
        records,
    })
}

/// The records a user named as one side of a comparison: `selector` is a records file when
/// such a file exists, else a run selector (run id, `label:NAME=VALUE`, a label value,
/// `latest`, a run-id prefix; see [`Store::find_run`]) resolved in the store at
/// `store_path`, restricted to `machine` for `latest` and labels. `name` names the input in
/// errors (the command line passes its flag, `--baseline` or `--candidate`). A missing
/// SQLite store is an error, never created.
pub fn resolve_side(
    selector: &str,
    store_path: &Path,
    machine: Option<&str>,
    name: &str,
) -> Result<Vec<Record>> {
    let p = Path::new(selector);
    if p.is_file() {
        return read_records_jsonl(p).map_err(|source| JobError::RecordsFile {
            input: name.to_string(),
            source,
        });
    }
    if is_missing_file(store_path) {
        return Err(JobError::Unavailable {
            input: format!("{name} `{selector}`"),
            message: format!(
                "no such records file, and no store at {} to resolve it as a run",
                shown(store_path)
            ),
        });
    }
    let store = Store::open(store_path)?;
    let run = store
        .find_run(selector, machine)
        .map_err(|source| JobError::Selector {
            input: name.to_string(),
            selector: selector.to_string(),
            source: Box::new(source),
        })?;
    Ok(store.run_records(&run.run_id)?)
}

/// [`history_baseline`] in the store at `store_path`, for a number of runs a user gave:
/// `runs` must be between 1 and [`MAX_HISTORY_RUNS`], and a missing SQLite store is an error
/// (never created). `name` names the input in errors (the command line's `--history`).
pub fn resolve_history(
    runs: usize,
    store_path: &Path,
    candidate: &[Record],
    name: &str,
) -> Result<Vec<Record>> {
    if runs == 0 || runs > MAX_HISTORY_RUNS {
        return Err(JobError::invalid(
            name,
            runs,
            format!("must be between 1 and {MAX_HISTORY_RUNS}"),
        ));
    }
    if is_missing_file(store_path) {
        return Err(JobError::Unavailable {
            input: name.to_string(),
            message: format!("no store at {}", shown(store_path)),
        });
    }
    let store = Store::open(store_path)?;
    history_baseline(&store, candidate, runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use tensorforge_store::testing::record;
    use tensorforge_store::{new_run_id, write_records_jsonl};

    /// A new, empty folder under the system's temporary directory.
    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tf-baseline-{tag}-{}", new_run_id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A run of workloads `ws` (`g<i>`) on `machine` at `threads` threads, time `ts`, every
    /// record labelled `job=<job>` when given.
    fn run(
        id: &str,
        ws: &[u64],
        machine: &str,
        ts: i64,
        threads: u32,
        job: Option<&str>,
    ) -> Vec<Record> {
        ws.iter()
            .map(|&i| {
                let mut r = record(id, i, machine, ts, threads, None);
                if let Some(j) = job {
                    r.labels.insert("job".into(), j.into());
                }
                r
            })
            .collect()
    }

    /// (run id, workload name) of each record, in order.
    fn ids(rs: &[Record]) -> Vec<(String, String)> {
        rs.iter()
            .map(|r| (r.run_id.clone(), r.workload.name.clone()))
            .collect()
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn history_is_the_newest_comparable_runs_per_workload_without_the_candidate() {
        let d = tmp("hist");
        let store = Store::open(&d.join("s.sqlite")).unwrap();
        for rs in [
            run("r1", &[1, 2], "m", 10, 1, None),
            run("r2", &[1, 2], "m", 20, 1, None),
            run("r3", &[1], "m", 30, 1, None),
            run("r4", &[2], "m", 40, 1, None),
            // Not comparable: another machine, another thread count.
            run("other-machine", &[1, 2], "m2", 50, 1, None),
            run("other-threads", &[1, 2], "m", 60, 2, None),
            // The candidate itself is stored too: it must not be its own baseline.
            run("cand", &[1, 2], "m", 70, 1, None),
        ] {
            store.insert_run(&rs).unwrap();
        }
        // A confirmation re-measurement of g1 in another run: same workload, asked once.
        let mut candidate = run("cand", &[1, 2], "m", 70, 1, None);
        candidate.extend(run("cand-confirm1", &[1], "m", 71, 1, None));
        let got = history_baseline(&store, &candidate, 2).unwrap();
        assert_eq!(
            ids(&got),
            pairs(&[("r2", "g1"), ("r3", "g1"), ("r2", "g2"), ("r4", "g2")])
        );
        // More runs than stored: all comparable ones, oldest first; none asked: nothing.
        let all = history_baseline(&store, &candidate, 100).unwrap();
        assert_eq!(all.len(), 6);
        assert!(history_baseline(&store, &candidate, 0).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_jobs_history_is_its_labelled_runs_on_this_machine_newest_first() {
        let d = tmp("label");
        let store = Store::open(&d.join("s.sqlite")).unwrap();
        let q1 = Some("quickstart-1t");
        for rs in [
            run("q-a", &[1, 2], "m", 10, 1, q1),
            run("q-b", &[1, 2], "m", 20, 1, q1),
            run("q-c", &[1, 2], "m", 30, 1, q1),
            run("bench", &[1, 2], "m", 40, 1, None),
            run("q-2t", &[1, 2], "m", 50, 2, Some("quickstart-2t")),
            run("q-elsewhere", &[1, 2], "m2", 60, 1, q1),
        ] {
            store.insert_run(&rs).unwrap();
        }
        let h = labelled_history(&store, "m", "job", "quickstart-1t", 2).unwrap();
        let runs: Vec<&str> = h.runs.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(runs, ["q-c", "q-b"]);
        assert_eq!(
            ids(&h.records),
            pairs(&[("q-c", "g1"), ("q-c", "g2"), ("q-b", "g1"), ("q-b", "g2")])
        );
        assert!(!h.is_empty());
        assert!(labelled_history(&store, "m3", "job", "quickstart-1t", 5)
            .unwrap()
            .is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_side_is_a_records_file_or_a_stored_run_and_errors_name_the_input() {
        let d = tmp("side");
        let store_path = d.join("s.sqlite");
        let missing = d.join("none.sqlite");
        // A file is read whether or not a store exists.
        let file = d.join("base.jsonl");
        let recs = run("f1", &[1, 2], "m", 10, 1, None);
        write_records_jsonl(&file, &recs).unwrap();
        let got = resolve_side(file.to_str().unwrap(), &missing, None, "--baseline").unwrap();
        assert_eq!(got, recs);
        // Not a file and no store: an error, and no store is created.
        let e = resolve_side("latest", &missing, None, "--baseline")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "--baseline `latest`: no such records file, and no store at {} to resolve it as a run",
                missing.display()
            )
        );
        assert!(!missing.exists());
        // A selector resolved in the store, restricted to a machine for `latest`.
        let store = Store::open(&store_path).unwrap();
        store
            .insert_run(&run("s1", &[1], "m", 10, 1, None))
            .unwrap();
        store
            .insert_run(&run("s2", &[1], "m2", 20, 1, None))
            .unwrap();
        let got = resolve_side("latest", &store_path, Some("m"), "--candidate").unwrap();
        assert_eq!(ids(&got), pairs(&[("s1", "g1")]));
        let got = resolve_side("latest", &store_path, None, "--candidate").unwrap();
        assert_eq!(ids(&got), pairs(&[("s2", "g1")]));
        // A selector that matches nothing: the input and the selector, then the store's words.
        let e = resolve_side("nope", &store_path, None, "--candidate").unwrap_err();
        let text = e.to_string();
        assert_eq!(text, "--candidate `nope`");
        let cause = std::error::Error::source(&e).unwrap().to_string();
        assert!(cause.contains("no run matches `nope`"), "{cause}");
        // A records file that does not parse: the input, then the file's error.
        let bad = d.join("bad.jsonl");
        std::fs::write(&bad, "not json\n").unwrap();
        let e = resolve_side(bad.to_str().unwrap(), &store_path, None, "--baseline").unwrap_err();
        assert_eq!(e.to_string(), "--baseline");
        let cause = std::error::Error::source(&e).unwrap().to_string();
        assert!(cause.contains("bad.jsonl:1"), "{cause}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_history_asked_for_by_a_user_is_checked_first() {
        let d = tmp("ask");
        let missing = d.join("none.sqlite");
        let cand = run("c", &[1], "m", 10, 1, None);
        for n in [0, MAX_HISTORY_RUNS + 1] {
            let e = resolve_history(n, &missing, &cand, "--history")
                .unwrap_err()
                .to_string();
            assert_eq!(
                e,
                format!("invalid `--history` = `{n}`: must be between 1 and 10000")
            );
        }
        let e = resolve_history(3, &missing, &cand, "--history")
            .unwrap_err()
            .to_string();
        assert_eq!(e, format!("--history: no store at {}", missing.display()));
        assert!(!missing.exists());
        let store_path = d.join("s.sqlite");
        let store = Store::open(&store_path).unwrap();
        store.insert_run(&run("h1", &[1], "m", 5, 1, None)).unwrap();
        let got = resolve_history(3, &store_path, &cand, "--history").unwrap();
        assert_eq!(ids(&got), pairs(&[("h1", "g1")]));
        let _ = std::fs::remove_dir_all(&d);
    }
}
