"""citeflow: a research assistant whose every sentence cites a quote found on a page it fetched."""
