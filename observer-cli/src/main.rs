fn main() -> std::process::ExitCode {
    roce_observer_cli::main()
}
