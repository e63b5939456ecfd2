use std::fmt;

/// Everything the runtime can refuse, with a message that says why.
#[derive(Debug)]
pub enum Error {
    /// Buffers whose lengths disagree with the matrix shape.
    Shape(String),
    /// Quantized data that is not a valid matrix.
    Format(String),
    /// A weight format no kernel family runs, or a name that is not a format.
    Unsupported(String),
    /// No kernel for the format, or a forced ISA this CPU or build lacks.
    NoKernel(String),
    /// A weight file that could not be read.
    Load(String),
}

impl Error {
    /// The message, without the kind's prefix.
    pub fn message(&self) -> &str {
        match self {
            Error::Shape(m)
            | Error::Format(m)
            | Error::Unsupported(m)
            | Error::NoKernel(m)
            | Error::Load(m) => m,
        }
    }
}

impl Error {
    /// The same error, its message led by `at` (where it happened: a file,
    /// a layer).
    pub(crate) fn prefixed(self, at: &str) -> Error {
        let lead = |m: String| format!("{at}{m}");
        match self {
            Error::Shape(m) => Error::Shape(lead(m)),
            Error::Format(m) => Error::Format(lead(m)),
            Error::Unsupported(m) => Error::Unsupported(lead(m)),
            Error::NoKernel(m) => Error::NoKernel(lead(m)),
            Error::Load(m) => Error::Load(lead(m)),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Shape(m) => write!(f, "shape mismatch: {m}"),
            Error::Format(m) => write!(f, "invalid quantized matrix: {m}"),
            Error::Unsupported(m) => write!(f, "unsupported weight format: {m}"),
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

/// Lets [`crate::Matrix::from_f32`] take a [`crate::WeightFormat`] (whose
/// conversion cannot fail) as well as a name.
impl From<std::convert::Infallible> for Error {
    fn from(e: std::convert::Infallible) -> Self {
        match e {}
    }
}
