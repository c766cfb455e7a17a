//! Exports of a read trace: Chrome trace JSON, folded stacks and the HTML report.
