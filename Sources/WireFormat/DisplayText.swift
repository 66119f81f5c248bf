/// Text a caller chose (a label, an executable's path) made safe to show to a person or to write as
/// one token of a log line.
package enum DisplayText {
    /// `text` in double quotes, with quotes, backslashes, control characters, line and paragraph
    /// separators and invisible format characters (bidirectional overrides among them) escaped as
    /// `\u{…}`, so that it can neither end the quote, start a new line of a log or a dialog, nor
    /// make the rest of a question read backwards. Cut at `limit` characters, with "…", when given.
    package static func quoted(_ text: String, limit: Int? = nil) -> String {
        var result = "\""
        var count = 0
        for scalar in text.unicodeScalars {
            if let limit, count == limit {
                result += "…"
                break
            }
            count += 1
            switch scalar.properties.generalCategory {
            case _ where scalar == "\"" || scalar == "\\":
                result += "\\" + String(scalar)
            case .control, .format, .lineSeparator, .paragraphSeparator:
                result += "\\u{\(String(scalar.value, radix: 16))}"
            default:
                result.unicodeScalars.append(scalar)
            }
        }
        return result + "\""
    }
}
