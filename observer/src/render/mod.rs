//! A report drawn for people: the terminal table, the findings, the ECMP view and the HTML
//! page. (The JSON is the report itself, serialised.)

pub mod ecmp;
pub mod findings;
pub mod html;
pub mod table;
