//! A report drawn for people: the terminal table, the findings, the ECMP view and the HTML
//! page, and the JSON.

pub mod ecmp;
pub mod fabric;
pub mod fabric_html;
pub mod findings;
pub mod html;
pub mod json;
pub mod nic;
pub mod table;
pub mod trace;
