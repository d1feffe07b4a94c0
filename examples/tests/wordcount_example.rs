//! Runs `cargo run --example wordcount` as a user would: it counts its text
//! on the embedded broker and checks its own result; with `--follow` it
//! keeps running until SIGTERM, which closes it cleanly (exit 0) through
//! `ShutdownSignal`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{example_path, run_example};

#[test]
fn the_word_count_counts_every_word() {
    let (stdout, stderr) = run_example("wordcount");
    assert!(
        stdout.contains("distinct words counted correctly"),
        "{stdout}\n{stderr}"
    );
}

#[test]
#[allow(unsafe_code)] // kill(2) to the child this test started, by its pid
fn sigterm_closes_a_following_word_count_cleanly() {
    let mut child = Command::new(example_path("wordcount"))
        .arg("--follow")
        .env_remove("RILL_CONFIG_BOOTSTRAP_SERVERS")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the example starts");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !seen.iter().any(|l: &String| l.starts_with("following;")) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => seen.push(l),
            Err(_) => {
                let _ = child.kill();
                panic!("no \"following;\" line in 120 s: {seen:?}");
            }
        }
    }
    // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running 60 s after SIGTERM: {seen:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(5)) {
        seen.push(l);
    }
    assert!(status.success(), "exit {status:?}: {seen:?}");
    assert!(
        seen.iter()
            .any(|l| l.starts_with("signal received; closing")),
        "{seen:?}"
    );
}
