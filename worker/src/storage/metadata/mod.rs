//! What ferry records in an object's user metadata beside its POSIX attributes, for stores
//! that keep metadata but hold no extended attributes and no holes (`Capabilities::props`): one
//! key for the attributes, one for where a sparse file had data. The format is ferry's, not a
//! backend's: any store with user metadata reads and writes it the same way.

pub mod sparse;
pub mod xattrs;
