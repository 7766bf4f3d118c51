//! Where in the file a config problem is: `check` and a refused reload name the line of the
//! `[[workflow]]`, `[[source]]` or `[[target]]` a problem is about, so an admin goes straight
//! to it.
//!
//! Invariant: a problem's words are never changed, only ` (line N)` appended, and only when
//! the table its leading name names is found (an inline table or an unusual spelling
//! leaves the problem as it was).

/// `problem` with the line of the table it names, when it names one and says no line yet.
pub fn locate(problem: String, text: &str) -> String {
    if problem.contains("(line ") {
        return problem;
    }
    let (table, key, rest) = if let Some(rest) = problem.strip_prefix("workflow `") {
        ("[[workflow]]", "id", rest)
    } else if let Some(rest) = problem.strip_prefix("target `") {
        ("[[target]]", "name", rest)
    } else if let Some((kind, rest)) = problem.split_once(" source `")
        && !kind.contains(' ')
    {
        ("[[source]]", "name", rest)
    } else {
        return problem;
    };
    let Some((name, _)) = rest.split_once('`') else {
        return problem;
    };
    match line_of_table(text, table, key, name) {
        Some(line) => format!("{problem} (line {line})"),
        None => problem,
    }
}

/// The 1-based line of `key = "<value>"` inside a `table` (`[[workflow]]`) of `text`.
fn line_of_table(text: &str, table: &str, key: &str, value: &str) -> Option<usize> {
    let mut inside = false;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            inside = trimmed == table;
            continue;
        }
        if inside
            && let Some((k, v)) = trimmed.split_once('=')
            && k.trim() == key
            && v.trim().trim_matches(|c| c == '"' || c == '\'') == value
        {
            return Some(index + 1);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::locate;

    const TEXT: &str = "[server]\n\n[[target]]\nname = \"hook\"\n\n[[source]]\nkind = \"webhook\"\nname = \"zendesk\"\n\n[[workflow]]\nid = \"triage\"\n";

    #[test]
    fn problems_about_a_table_name_its_line_and_keep_their_words() {
        for (problem, located) in [
            (
                "workflow `triage` names target `x`, which is not defined",
                "workflow `triage` names target `x`, which is not defined (line 11)",
            ),
            (
                "workflow `triage`: unknown channel `fax`",
                "workflow `triage`: unknown channel `fax` (line 11)",
            ),
            (
                "target `hook` is defined more than once",
                "target `hook` is defined more than once (line 4)",
            ),
            (
                "webhook source `zendesk`: no signing secret",
                "webhook source `zendesk`: no signing secret (line 8)",
            ),
            // Not found, not about a table, or already located: unchanged.
            (
                "workflow `other`: unknown channel `fax`",
                "workflow `other`: unknown channel `fax`",
            ),
            (
                "server.body_limit must be greater than 0",
                "server.body_limit must be greater than 0",
            ),
            (
                "workflow `triage` (line 11) is live but names no principal",
                "workflow `triage` (line 11) is live but names no principal",
            ),
        ] {
            assert_eq!(locate(problem.to_owned(), TEXT), located);
        }
    }
}
