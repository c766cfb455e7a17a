//! `Dataset`: a run's partition replaced whole or not at all, never written through a link.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use testkit::files_under;
use trace_parquet::{Dataset, ParquetError, Table};

/// Writes `marker` into every table file of `rank` in `build` (the dataset code does not
/// look inside tables it writes, but an old partition's tables must start with `PAR1`).
fn fill(build: &mut trace_parquet::RunBuild<'_>, rank: u32, marker: &str) {
    for mut f in build.rank_outputs(rank).unwrap() {
        write!(f, "PAR1{marker}").unwrap();
    }
}

/// A dataset holding run `job` with ranks 0..4 written with marker `old`.
fn old_run(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let ds = Dataset::open(root).unwrap();
    let mut b = ds.begin_run("job").unwrap();
    for r in 0..4 {
        fill(&mut b, r, "old");
    }
    b.commit().unwrap();
    files_under(root)
}

#[test]
fn a_commit_replaces_the_whole_run_and_a_drop_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    let before = old_run(&root);
    assert_eq!(before.len(), 4 * Table::COUNT);
    assert!(
        before
            .iter()
            .all(|(p, _)| p.starts_with("run=job") && !p.to_string_lossy().contains(".tmp"))
    );
    // A build dropped half done (an error in rank 2): nothing changed, nothing left.
    let ds = Dataset::open(&root).unwrap();
    {
        let mut b = ds.begin_run("job").unwrap();
        fill(&mut b, 0, "new");
        fill(&mut b, 1, "new");
        assert_eq!(
            std::fs::read_dir(&root).unwrap().count(),
            2,
            "the build sits beside the run"
        );
    }
    assert_eq!(files_under(&root), before);
    // A committed build of two ranks replaces all four: no rank of the old export is left.
    let mut b = ds.begin_run("job").unwrap();
    fill(&mut b, 0, "new");
    fill(&mut b, 1, "new");
    b.commit().unwrap();
    let after = files_under(&root);
    assert_eq!(after.len(), 2 * Table::COUNT);
    assert!(after.iter().all(|(_, bytes)| bytes == b"PAR1new"));
    let names: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["run=job"]);
    // A rank given twice in one build is refused.
    let mut b = ds.begin_run("job").unwrap();
    fill(&mut b, 0, "x");
    assert!(b.rank_outputs(0).is_err());
}

#[test]
fn a_link_inside_the_dataset_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    old_run(&root);
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let rank0 = root.join("run=job/rank=0");
    std::fs::remove_dir_all(&rank0).unwrap();
    link(&elsewhere, &rank0);
    let before = files_under(&root);
    let ds = Dataset::open(&root).unwrap();
    let mut b = ds.begin_run("job").unwrap();
    fill(&mut b, 0, "new");
    match b.commit() {
        Err(ParquetError::Symlink { path }) => assert_eq!(path, rank0),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        files_under(&root),
        before,
        "the old partition as it was, no build left"
    );
    assert!(
        files_under(&elsewhere).is_empty(),
        "nothing written through the link"
    );
    assert!(
        ds.begin_run("job")
            .unwrap()
            .commit()
            .unwrap_err()
            .to_string()
            .contains("rank=0 is a symbolic link")
    );

    // A table that is a link to a user's file.
    let root = dir.path().join("ds2");
    old_run(&root);
    let user = dir.path().join("user.txt");
    std::fs::write(&user, "mine").unwrap();
    let spans = root.join("run=job/rank=1/spans.parquet");
    std::fs::remove_file(&spans).unwrap();
    link(&user, &spans);
    let ds = Dataset::open(&root).unwrap();
    let mut b = ds.begin_run("job").unwrap();
    fill(&mut b, 1, "new");
    match b.commit() {
        Err(ParquetError::Symlink { path }) => assert_eq!(path, spans),
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read_to_string(&user).unwrap(), "mine");

    // The run's partition itself a link.
    let root = dir.path().join("ds3");
    std::fs::create_dir(&root).unwrap();
    link(&elsewhere, &root.join("run=job"));
    let ds = Dataset::open(&root).unwrap();
    let mut b = ds.begin_run("job").unwrap();
    fill(&mut b, 0, "new");
    assert!(matches!(b.commit(), Err(ParquetError::Symlink { .. })));
    assert!(files_under(&elsewhere).is_empty());
}

/// A symbolic link at `link` to `target`.
fn link(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

#[test]
fn the_root_may_be_a_link_and_foreign_files_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let root = dir.path().join("named");
    link(&real, &root);
    old_run(&root);
    assert!(real.join("run=job/rank=3/heap.parquet").is_file());
    // A user's file in the partition: the run is not replaced, the file stays.
    let notes = real.join("run=job/rank=1/notes.txt");
    std::fs::write(&notes, "mine").unwrap();
    let before = files_under(&real);
    let ds = Dataset::open(&root).unwrap();
    let mut b = ds.begin_run("job").unwrap();
    fill(&mut b, 0, "new");
    let err = b.commit().unwrap_err();
    assert!(matches!(err, ParquetError::Foreign { .. }), "{err}");
    assert!(err.to_string().contains("notes.txt"), "{err}");
    assert_eq!(files_under(&real), before);
    // A table file that is not Parquet (a trace named like a table) is not removed either.
    std::fs::remove_file(&notes).unwrap();
    let ops = real.join("run=job/rank=2/ops.parquet");
    std::fs::write(&ops, "{\"type\":\"header\"}\n").unwrap();
    let mut b = ds.begin_run("job").unwrap();
    fill(&mut b, 0, "new");
    assert!(
        b.commit()
            .unwrap_err()
            .to_string()
            .contains("not a Parquet file")
    );
    assert!(ops.is_file());
}

#[test]
fn long_run_ids_get_a_bounded_partition_name() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    let ds = Dataset::open(&root).unwrap();
    for id in ["r".repeat(300), "é/".repeat(200)] {
        let mut b = ds.begin_run(&id).unwrap();
        fill(&mut b, 7, "x");
        b.commit().unwrap();
        let name = trace_parquet::run_partition_name(&id);
        assert!(name.len() <= 4 + trace_parquet::MAX_PARTITION_VALUE);
        assert!(root.join(&name).join("rank=7/ops.parquet").is_file());
    }
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 2);
}

#[test]
fn a_dead_processs_build_is_swept() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    std::fs::create_dir(&root).unwrap();
    // pid_max is at most 2^22 on Linux: this pid is never alive.
    let dead = root.join(".tmp-run=job-999999999-0");
    let other_run = root.join(".tmp-run=jobs-999999999-0");
    let user = root.join(".tmp-run=job-mine");
    for d in [&dead, &other_run, &user] {
        std::fs::create_dir_all(d.join("rank=0")).unwrap();
    }
    // A dead process's build name holding a file no export writes: somebody's, kept.
    let foreign = root.join(".tmp-run=job-999999998-0");
    std::fs::create_dir_all(foreign.join("rank=0")).unwrap();
    std::fs::write(foreign.join("notes.txt"), "mine").unwrap();
    let ds = Dataset::open(&root).unwrap();
    drop(ds.begin_run("job").unwrap());
    assert_eq!(!dead.exists(), Path::new("/proc/self").exists());
    assert!(other_run.exists() && user.exists());
    assert_eq!(
        std::fs::read_to_string(foreign.join("notes.txt")).unwrap(),
        "mine"
    );
}
