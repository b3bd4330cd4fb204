//! Scratch folders that remove themselves.

/// A scratch folder under the temporary directory, new (a stale one of the same name is
/// removed first) and removed on drop.
pub struct Scratch(std::path::PathBuf);

impl Scratch {
    /// `roce-{tag}-{pid}-{n}`: unique per test binary run, tag and call (tests running at once
    /// may take the same tag: each gets a folder of its own).
    pub fn new(tag: &str) -> Self {
        static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("roce-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }

    /// Writes `content` to the file `name`; its path.
    pub fn file(&self, name: &str, content: &str) -> std::path::PathBuf {
        let p = self.path(name);
        std::fs::write(&p, content).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
