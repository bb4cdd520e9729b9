//! Each operation with a tenant's link, file or FIFO planted where it
//! works: nothing outside the directory is touched.

use super::*;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};

/// A directory `inside` (the tenant's) and `outside` (the host's), the
/// latter holding a file that must survive.
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let inside = t.path().join("inside");
    let outside = t.path().join("outside");
    fs::create_dir_all(&inside).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("passwd"), "root:x:0:0\n").unwrap();
    (t, inside, outside)
}

#[test]
fn a_link_where_a_directory_must_be_is_refused_naming_it() {
    let (_t, inside, outside) = setup();
    fs::create_dir(inside.join("a")).unwrap();
    symlink(&outside, inside.join("a/b")).unwrap();
    let d = Dir::open(&inside).unwrap();
    for r in [d.open_dir("a/b"), d.create_dir_all("a/b/c")] {
        let e = r.err().expect("refused");
        let msg = e.to_string();
        assert!(msg.contains("a/b: a symbolic link"), "{msg}");
    }
    assert!(!outside.join("c").exists(), "nothing made through the link");
    // A dangling link too, and a file.
    symlink("/nonexistent", inside.join("dangling")).unwrap();
    assert!(d.create_dir_all("dangling").is_err());
    fs::write(inside.join("file"), "").unwrap();
    let e = d.create_dir_all("file/x").err().expect("refused");
    assert!(e.to_string().contains("file: not a directory"), "{e}");
    assert!(d.open_dir("../outside").is_err() && d.open_dir("/etc").is_err());
}

#[test]
fn clearing_removes_the_links_not_what_they_point_to() {
    let (_t, inside, outside) = setup();
    fs::create_dir_all(inside.join("x/y")).unwrap();
    fs::write(inside.join("x/y/f"), "").unwrap();
    symlink(&outside, inside.join("x/y/to-dir")).unwrap();
    symlink(outside.join("passwd"), inside.join("x/to-file")).unwrap();
    symlink(&outside, inside.join("top")).unwrap();
    let d = Dir::open(&inside).unwrap();
    d.remove("x").unwrap();
    assert!(!inside.join("x").exists());
    d.clear().unwrap();
    assert_eq!(fs::read_dir(&inside).unwrap().count(), 0);
    assert_eq!(
        fs::read_to_string(outside.join("passwd")).unwrap(),
        "root:x:0:0\n"
    );
    d.remove("missing").unwrap();
}

#[test]
fn a_tree_deeper_than_the_bound_is_not_recursed_into() {
    let (_t, inside, _) = setup();
    let deep: PathBuf = (0..MAX_DEPTH + 2).map(|_| "d").collect();
    fs::create_dir_all(inside.join(&deep)).unwrap();
    let e = Dir::open(&inside).unwrap().clear().expect_err("refused");
    assert!(e.to_string().contains("levels deep"), "{e}");
}

#[test]
fn writing_replaces_a_planted_link_or_fifo_itself() {
    let (_t, inside, outside) = setup();
    symlink(outside.join("passwd"), inside.join("f")).unwrap();
    symlink(outside.join("passwd"), inside.join("g.tmp")).unwrap();
    nix::unistd::mkfifo(&inside.join("h"), Mode::from_bits_truncate(0o600)).unwrap();
    let d = Dir::open(&inside).unwrap();
    d.write("f", "one\n").unwrap();
    d.write_atomic("g", "two\n").unwrap();
    d.write("h", "three\n").unwrap();
    assert_eq!(fs::read_to_string(inside.join("f")).unwrap(), "one\n");
    assert_eq!(fs::read_to_string(inside.join("g")).unwrap(), "two\n");
    assert_eq!(fs::read_to_string(inside.join("h")).unwrap(), "three\n");
    assert!(!fs::symlink_metadata(inside.join("f"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        fs::read_to_string(outside.join("passwd")).unwrap(),
        "root:x:0:0\n"
    );
    assert!(!inside.join("g.tmp").exists());
}

#[test]
fn chmod_socket_sets_a_sockets_mode_and_refuses_a_link() {
    let (_t, inside, outside) = setup();
    let target = outside.join("passwd");
    fs::set_permissions(&target, fs::Permissions::from_mode(0o600)).unwrap();
    let _l = std::os::unix::net::UnixListener::bind(inside.join("s")).unwrap();
    symlink(&target, inside.join("link")).unwrap();
    let d = Dir::open(&inside).unwrap();
    d.chmod_socket("s", 0o666).unwrap();
    let mode = |p: &Path| fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&inside.join("s")), 0o666);
    assert_eq!(d.kind("s").unwrap(), Some(Kind::Socket));
    let e = d.chmod_socket("link", 0o666).expect_err("refused");
    assert!(e.to_string().contains("link: "), "{e}");
    fs::write(inside.join("file"), "").unwrap();
    let e = d.chmod_socket("file", 0o666).expect_err("refused");
    assert!(e.to_string().contains("not a socket"), "{e}");
    assert_eq!(mode(&target), 0o600, "the link's target keeps its mode");
}

/// The control socket's way (a stream socket): bound 0600 from its first
/// moment, in a private directory, replacing a stale one; nothing is left
/// beside it.
#[test]
fn a_socket_bound_here_has_its_mode_before_it_has_its_name() {
    use std::os::unix::fs::FileTypeExt;
    use std::os::unix::net::{UnixListener, UnixStream};
    let (_t, inside, _outside) = setup();
    let d = Dir::open(&inside).unwrap();
    let path = inside.join("control.sock");
    drop(UnixListener::bind(&path).unwrap()); // a stale one, the umask's mode
    let _l = d
        .bind_socket_then(
            OsStr::new("control.sock"),
            0o600,
            |at| UnixListener::bind(at),
            |private| {
                let m = fs::metadata(private).unwrap();
                assert_eq!(m.permissions().mode() & 0o777, 0o700);
                let stale = fs::symlink_metadata(&path).unwrap();
                assert_ne!(
                    stale.permissions().mode() & 0o777,
                    0o600,
                    "still the stale one"
                );
            },
        )
        .unwrap();
    let m = fs::symlink_metadata(&path).unwrap();
    assert!(m.file_type().is_socket());
    assert_eq!(m.permissions().mode() & 0o777, 0o600);
    UnixStream::connect(&path).expect("it listens");
    assert_eq!(d.names().unwrap(), vec![OsString::from("control.sock")]);
}
