extension StringProtocol {
    /// The text without the whitespace and line breaks around it (`Character.isWhitespace`):
    /// what Foundation's `trimmingCharacters(in: .whitespacesAndNewlines)` gives, without that
    /// API's string machinery, which brings ICU and its 34 MB of data into a static binary.
    package func trimmingWhitespace() -> String {
        guard let first = firstIndex(where: { !$0.isWhitespace }),
            let last = lastIndex(where: { !$0.isWhitespace })
        else { return "" }
        return String(self[first...last])
    }
}
