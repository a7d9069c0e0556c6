//! A model folder: a directory on disk, or the same files in memory (what
//! a browser page gets when a user picks or drops them).

use kiln::{KilnError, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a model's files are.
#[derive(Clone, Debug)]
pub enum Folder {
    /// A directory.
    Dir(PathBuf),
    /// Files by name (`config.json`, `model.safetensors`, …), in memory.
    Files(BTreeMap<String, Arc<Vec<u8>>>),
}

impl Folder {
    /// The folder at `dir`.
    pub fn dir(dir: impl AsRef<Path>) -> Folder {
        Folder::Dir(dir.as_ref().to_path_buf())
    }

    /// Files in memory, by name (a path's last component: `a/config.json`
    /// is `config.json`).
    pub fn files(files: impl IntoIterator<Item = (String, Vec<u8>)>) -> Folder {
        let base = |name: &str| name.rsplit(['/', '\\']).next().unwrap_or(name).to_string();
        Folder::Files(files.into_iter().map(|(name, bytes)| (base(&name), Arc::new(bytes))).collect())
    }

    /// Where file `name` is, as errors name it.
    pub fn path(&self, name: &str) -> PathBuf {
        match self {
            Folder::Dir(dir) => dir.join(name),
            Folder::Files(_) => PathBuf::from(name),
        }
    }

    /// Whether the folder holds file `name`.
    pub fn has(&self, name: &str) -> bool {
        match self {
            Folder::Dir(dir) => dir.join(name).is_file(),
            Folder::Files(files) => files.contains_key(name),
        }
    }

    /// File `name`'s bytes; `op` names the reader in the error of a
    /// missing or unreadable file.
    pub fn read(&self, op: &'static str, name: &str) -> Result<Arc<Vec<u8>>> {
        let missing = |detail: String| KilnError::File { op, path: self.path(name).display().to_string(), detail };
        match self {
            Folder::Dir(dir) => {
                std::fs::read(dir.join(name)).map(Arc::new).map_err(|e| missing(format!("cannot read: {e}")))
            }
            Folder::Files(files) => {
                let have: Vec<&str> = files.keys().map(String::as_str).collect();
                files
                    .get(name)
                    .cloned()
                    .ok_or_else(|| missing(format!("is not among the files given ({})", have.join(", "))))
            }
        }
    }

    /// File `name` as UTF-8 text.
    pub fn read_text(&self, op: &'static str, name: &str) -> Result<String> {
        let bytes = self.read(op, name)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| KilnError::File {
            op,
            path: self.path(name).display().to_string(),
            detail: format!("is not UTF-8 text: {e}"),
        })
    }
}
