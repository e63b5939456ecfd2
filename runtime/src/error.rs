use std::fmt;

/// Everything the runtime can refuse, with a message that says why.
#[derive(Debug)]
pub enum Error {
    /// Buffers whose lengths disagree with the matrix shape.
    Shape(String),
    /// Quantized data that is not a valid matrix.
    Format(String),
    /// No kernel for the format, or a forced ISA this CPU or build lacks.
    NoKernel(String),
    /// A weight file that could not be read.
    Load(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Shape(m) => write!(f, "shape mismatch: {m}"),
            Error::Format(m) => write!(f, "invalid quantized matrix: {m}"),
            Error::NoKernel(m) => write!(f, "no kernel: {m}"),
            Error::Load(m) => write!(f, "cannot load weights: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<kgen::format::error::FormatError> for Error {
    fn from(e: kgen::format::error::FormatError) -> Self {
        Error::Format(e.0)
    }
}

impl From<crate::gptq_file::LoadError> for Error {
    fn from(e: crate::gptq_file::LoadError) -> Self {
        Error::Load(e.to_string())
    }
}
