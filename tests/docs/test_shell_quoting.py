"""Every shell command of the README and the documentation runs as written in zsh (macOS's default shell) as well
as in bash: a word with an unquoted ``[...]``, as ``milestones=[1200,1600]``, is a glob pattern to zsh, which stops
with "no matches found" when no file matches it. Such overrides are quoted (``'milestones=[1200,1600]'``); a glob
meant as one (``/proc/[0-9]*/environ``) is no override and stays."""
import re

from support.docs import code_blocks

OVERRIDE = re.compile(r"^-*[\w.]+=")  # key=value, --flag=value


def unquoted_bracket_words(line: str) -> list:
    """The words of one shell line in which a ``[`` stands outside quotes (a lone ``[`` or ``[[``, the test
    command, aside); a ``#`` that starts a word ends the line."""
    words, word, bracket, quote, index = [], "", False, None, 0
    while index < len(line):
        char = line[index]
        if quote:
            quote = None if char == quote else quote
        elif char == "\\":
            word += line[index:index + 2]
            index += 2
            continue
        elif char in "'\"":
            quote = char
        elif char.isspace():
            if bracket and word.strip("[") and word not in ("[", "[["):
                words.append(word)
            word, bracket = "", False
            index += 1
            continue
        elif char == "#" and not word:
            break
        elif char == "[":
            bracket = True
        word += char
        index += 1
    if bracket and word.strip("[") and word not in ("[", "[["):
        words.append(word)
    return words


def test_the_scanner_finds_unquoted_brackets_and_only_those():
    assert unquoted_bracket_words("basetrainer train milestones=[1200,1600] num_warn_up=100") == [
        "milestones=[1200,1600]"]
    assert unquoted_bracket_words("""basetrainer train 'milestones=[1200,1600]' "crop_scale=[0.2,1]" """) == []
    assert unquoted_bracket_words("[ -f x ] && echo x   # a=[1,2] in a comment") == []
    assert unquoted_bracket_words(r"echo a\[1]") == []


def test_no_shell_command_of_the_docs_has_an_unquoted_bracket_override():
    found = [f"{block}: {word}" for block in code_blocks("bash")
             for line in block.text.replace("\\\n", " ").splitlines() for word in unquoted_bracket_words(line)
             if OVERRIDE.match(word)]
    assert found == [], "quote these words for zsh ('key=[a,b]'), as the other pages do"
