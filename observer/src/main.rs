fn main() -> std::process::ExitCode {
    roce_observer::cli::main()
}
