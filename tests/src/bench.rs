//! What `bench_proxy` (issue 14) is made of: the systems it compares side by side, the loads it
//! runs against each, the process figures it reads from `/proc`, and the report it prints and
//! writes. Not a test: it measures and prints.

pub mod clients;
pub mod load;
pub mod procs;
pub mod report;
pub mod systems;
pub mod targets;
