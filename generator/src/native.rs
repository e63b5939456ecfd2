//! The `native` target: a description read off the running CPU.
