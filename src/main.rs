use std::process::ExitCode;

fn main() -> ExitCode {
    ouroboros::cli::main()
}
