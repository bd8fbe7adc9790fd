"""The campaign report: what a campaign directory holds, turned into pages a person reads.

Pure pieces (statistics, series, vector clocks, SVG/HTML/ShiViz text) are separate from
the few modules that read a campaign directory or write the report's files.
"""
