"""Speed, measured only here: ratios against a baseline taken in the same run."""
