//! The container image of deploy/Containerfile (podman, which needs root here) built and run as
//! the DaemonSets run it. The deployment files themselves: deploy.rs.
//!
//! Tools: podman from PATH (`cargo xtask setup` installs it). A missing tool fails the test under
//! CI and skips it loudly otherwise.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use integration_tests::{Scratch, output, require_root, tool, workspace_root as root};

/// A container builder that works here (podman), or none, said loudly.
fn builder(test: &str) -> Option<PathBuf> {
    let podman = tool(test, "podman")?;
    let (status, _, err) = output(Command::new(&podman).args(["info"]));
    if !status.success() {
        eprintln!(
            "\n*** SKIPPED {test}: podman cannot work here: {} ***\n",
            err.trim()
        );
        return None;
    }
    Some(podman)
}

/// The image built and run as the DaemonSets run it. deploy/Containerfile is built when its
/// base images can be pulled; where no registry is reachable (said loudly), its runtime stage is
/// built from scratch with the same layout (the binary at /usr/local/bin, its libraries, user
/// 65534, the same entrypoint). Either image's configuration is checked, and its binary runs
/// from the image's own filesystem as nobody without capabilities (chroot: containers cannot
/// run where the cgroups are in hybrid mode).
#[test]
fn container_image_builds_and_runs_as_nobody() {
    let test = "container_image_builds_and_runs_as_nobody";
    if !require_root(test) {
        return;
    }
    let Some(podman) = builder(test) else {
        return;
    };
    let tag = format!("localhost/roce-observer-test:{}", std::process::id());
    let (status, _, err) = output(
        Command::new(&podman)
            .args([
                "build",
                "--pull=missing",
                "-q",
                "-f",
                "deploy/Containerfile",
                "-t",
                &tag,
            ])
            .arg(".")
            .current_dir(root()),
    );
    let scratch = Scratch::new("image");
    if !status.success() {
        let unreachable = [
            "pinging container registry",
            "no such host",
            "initializing source",
        ]
        .iter()
        .any(|m| err.contains(m));
        assert!(unreachable, "deploy/Containerfile does not build:\n{err}");
        eprintln!(
            "\n*** {test}: deploy/Containerfile NOT built: its base images cannot be pulled here ({}); building its runtime stage's layout from scratch instead ***\n",
            err.lines().last().unwrap_or("").trim()
        );
        let ctx = scratch.path("ctx");
        let bin = Path::new(env!("CARGO_BIN_EXE_roce-observer-under-test"));
        std::fs::create_dir_all(ctx.join("usr/local/bin")).unwrap();
        std::fs::copy(bin, ctx.join("usr/local/bin/roce-observer")).unwrap();
        let (_, ldd, _) = output(Command::new("ldd").arg(bin));
        for lib in ldd.split_whitespace().filter(|w| w.starts_with('/')) {
            let to = ctx.join(lib.trim_start_matches('/'));
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(lib, &to).unwrap();
        }
        std::fs::write(
            ctx.join("Containerfile"),
            "FROM scratch\nCOPY usr /usr\nCOPY lib /lib\nCOPY lib64 /lib64\nUSER 65534:65534\nENTRYPOINT [\"/usr/local/bin/roce-observer\"]\n",
        )
        .unwrap();
        std::fs::create_dir_all(ctx.join("lib64")).unwrap();
        let (status, _, err) = output(
            Command::new(&podman)
                .args(["build", "-q", "-t", &tag])
                .arg(&ctx),
        );
        assert!(status.success(), "{err}");
    }
    let (_, config, _) = output(Command::new(&podman).args([
        "image",
        "inspect",
        &tag,
        "--format",
        "{{.Config.User}} {{json .Config.Entrypoint}}",
    ]));
    assert_eq!(
        config.trim(),
        r#"65534:65534 ["/usr/local/bin/roce-observer"]"#
    );
    let (status, mount, err) = output(Command::new(&podman).args(["image", "mount", &tag]));
    assert!(status.success(), "{err}");
    let mount = mount.trim().to_string();
    let run = |args: &[&str]| {
        output(
            Command::new("chroot")
                .args([
                    "--userspec=65534:65534",
                    &mount,
                    "/usr/local/bin/roce-observer",
                ])
                .args(args),
        )
    };
    let (status, out, err) = run(&["--version"]);
    assert!(status.success(), "{err}");
    assert!(out.starts_with("roce-observer "), "{out}");
    // Its libraries resolve and it refuses what it should, as nobody.
    let (status, _, err) = run(&["run"]);
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("nothing to observe"), "{err}");
    let _ = output(Command::new(&podman).args(["image", "unmount", &tag]));
    let _ = output(Command::new(&podman).args(["rmi", "-f", &tag]));
}
