//! The Slurm boundary: typed requests and observations, the real CLI driver, output parsers.
