"""What the aggregate's report says under each section heading: one Markdown file per section,
``{anchor}.md`` (CommonMark with tables; raw HTML is shown as text). ``report.html`` renders it with
markdown-it-py, the section files the aggregate writes (``{anchor}.md``) copy it, and the docs page
``docs/report-sections.md`` includes it, so the prose is edited here and nowhere else. A package that
adds a section ships its own prose package (``Section.prose_package``)."""
